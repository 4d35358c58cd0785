package abi

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecode: Decode never panics, rejects only with ErrInvalid, and what it
// accepts encodes back to the same bytes and validates again.
func FuzzDecode(f *testing.F) {
	valid := sampleRequest()
	f.Add(valid.Encode())
	f.Fuzz(func(t *testing.T, buf []byte) {
		r, err := Decode(buf)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if enc := r.Encode(); !bytes.Equal(enc, buf) {
			t.Fatalf("Encode(Decode(b)) != b:\n% x\n% x", enc, buf)
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("an accepted request fails Validate: %v", err)
		}
		if r.Flags&FlagHostBuffer != 0 && r.HostBufferName() == "" {
			t.Fatal("accepted a host buffer request without a name")
		}
	})
}
