package abi

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// IOWR encodes as the kernel does (here its seccomp notification ioctl,
// _IOWR('!', 0, struct seccomp_notif) of 80 bytes, as x/sys/unix has it
// from the kernel's headers), and IocRead is its encoding of
// S3GDS_IOC_READ; TestCHeaderMatchesGo holds the C header to it.
func TestIocRead(t *testing.T) {
	if got := IOWR('!', 0, 80); got != unix.SECCOMP_IOCTL_NOTIF_RECV {
		t.Fatalf("IOWR('!', 0, 80) = %#x, want the kernel's %#x", got, uint32(unix.SECCOMP_IOCTL_NOTIF_RECV))
	}
	if got := IOWR('S', 0x01, Size); got != IocRead {
		t.Fatalf("IOWR('S', 1, %d) = %#x, want IocRead %#x", Size, got, IocRead)
	}
	if got := IOWR('S', 0x02, Size); got != IocWrite {
		t.Fatalf("IOWR('S', 2, %d) = %#x, want IocWrite %#x", Size, got, IocWrite)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("IOWR accepted a size that does not fit in 14 bits")
		}
	}()
	IOWR('S', 0x01, 1<<14)
}

// sampleRequest sets every field to a distinct value.
func sampleRequest() ReadRequest {
	r := NewReadRequest()
	r.Flags = FlagHTTPOnly | FlagDeclineIsError
	r.Device = -3
	r.Offset = 1 << 40
	r.Length = 768 << 20
	r.DstOffset = 256 << 20
	for i := range r.IPCHandle {
		r.IPCHandle[i] = byte(200 + i)
	}
	if err := r.SetToken(strings.Repeat("ab", 40) + "c"); err != nil {
		panic(err)
	}
	r.Bytes = 11
	r.ElapsedNs = 12
	r.Transport = TransportRDMA
	r.Decline = DeclineTokenRejected
	r.RDMABytes = 13
	r.HTTPBytes = 14
	return r
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	want := sampleRequest()
	buf := want.Encode()
	if len(buf) != Size {
		t.Fatalf("Encode gave %d bytes, want %d", len(buf), Size)
	}
	got, err := Decode(buf)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if got != want {
		t.Fatalf("round trip changed the request:\n got %+v\nwant %+v", got, want)
	}
	// The encoding is little-endian whatever the host.
	if !bytes.Equal(buf[:8], []byte{0, 1, 0, 0, 1, 0, 0, 0}) {
		t.Fatalf("size and version encode as % x", buf[:8])
	}
	if !bytes.Equal(buf[12:16], []byte{0xfd, 0xff, 0xff, 0xff}) {
		t.Fatalf("device -3 encodes as % x", buf[12:16])
	}
}

func TestDecodeRejects(t *testing.T) {
	valid := sampleRequest()
	cases := []struct {
		name   string
		mutate func(r *ReadRequest)
		buf    func(b []byte) []byte
		field  string
	}{
		{name: "truncated", buf: func(b []byte) []byte { return b[:Size-1] }, field: "size"},
		{name: "too long", buf: func(b []byte) []byte { return append(b, 0) }, field: "size"},
		{name: "empty", buf: func([]byte) []byte { return nil }, field: "size"},
		{name: "size field", mutate: func(r *ReadRequest) { r.Size = 255 }, field: "size"},
		{name: "version 0", mutate: func(r *ReadRequest) { r.Version = 0 }, field: "version"},
		{name: "version 2", mutate: func(r *ReadRequest) { r.Version = 2 }, field: "version"},
		{name: "unknown flag", mutate: func(r *ReadRequest) { r.Flags |= 16 }, field: "flags"},
		{name: "high flag", mutate: func(r *ReadRequest) { r.Flags |= 1 << 31 }, field: "flags"},
		{name: "rdma and http only", mutate: func(r *ReadRequest) { r.Flags = FlagRDMAOnly | FlagHTTPOnly }, field: "flags"},
		{name: "reserved 0", mutate: func(r *ReadRequest) { r.Reserved[0] = 1 }, field: "reserved[0]"},
		{name: "reserved 1", mutate: func(r *ReadRequest) { r.Reserved[1] = 1 << 63 }, field: "reserved[1]"},
		{name: "token without NUL", mutate: func(r *ReadRequest) {
			copy(r.RDMAToken[:], strings.Repeat("f", TokenLen))
		}, field: "rdma_token"},
		{name: "host buffer name empty", mutate: func(r *ReadRequest) {
			r.Flags |= FlagHostBuffer
			r.IPCHandle = [IPCHandleLen]byte{}
		}, field: "ipc_handle"},
		{name: "host buffer name without NUL", mutate: func(r *ReadRequest) {
			r.Flags = FlagHostBuffer
			copy(r.IPCHandle[:], strings.Repeat("x", IPCHandleLen))
		}, field: "ipc_handle"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := valid
			if c.mutate != nil {
				c.mutate(&r)
			}
			buf := r.Encode()
			if c.buf != nil {
				buf = c.buf(buf)
			}
			_, err := Decode(buf)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode error %v, want one wrapping ErrInvalid", err)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Decode error %v is not a *FieldError", err)
			}
			if fe.Field != c.field {
				t.Fatalf("Decode error %v names field %q, want %q", err, fe.Field, c.field)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Fatalf("message %q does not name %q", err, c.field)
			}
		})
	}
}

func TestDecodeAccepts(t *testing.T) {
	cases := map[string]func(r *ReadRequest){
		// Out fields of a reused struct are overwritten, never checked.
		"stale out fields": func(r *ReadRequest) {
			r.Bytes, r.ElapsedNs, r.Transport, r.Decline = 1<<63, 5, 77, 99
		},
		// A CUDA IPC handle is opaque: it need not hold a NUL.
		"binary ipc handle": func(r *ReadRequest) {
			r.Flags = 0
			copy(r.IPCHandle[:], bytes.Repeat([]byte{0xff}, IPCHandleLen))
		},
		"token of 95 characters": func(r *ReadRequest) {
			copy(r.RDMAToken[:], strings.Repeat("f", TokenLen-1))
			r.RDMAToken[TokenLen-1] = 0
		},
		"host buffer": func(r *ReadRequest) {
			if err := r.SetHostBufferName("/dev/shm/s3gds-test"); err != nil {
				panic(err)
			}
		},
		"every known flag but http_only": func(r *ReadRequest) { r.Flags = knownFlags &^ FlagHTTPOnly },
		"length 0":                       func(r *ReadRequest) { r.Length = 0 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			r := sampleRequest()
			mutate(&r)
			got, err := Decode(r.Encode())
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got != r {
				t.Fatalf("got %+v, want %+v", got, r)
			}
		})
	}
}

// Every transport and decline reason has a name of its own, fit for a
// metric label (the names themselves are held to the C header's by
// TestCHeaderMatchesGo); values beyond them and flags are spelt out.
func TestStrings(t *testing.T) {
	label := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	named := func(kind string, names []string) {
		seen := map[string]bool{}
		for i, n := range names {
			if seen[n] || !label.MatchString(n) {
				t.Errorf("%s %d is named %q: a name used twice, or not a label", kind, i, n)
			}
			seen[n] = true
		}
	}
	var transports, declines []string
	for v := range Transport(len(transportNames)) {
		transports = append(transports, v.String())
	}
	for v := range Decline(len(declineNames)) {
		declines = append(declines, v.String())
	}
	named("transport", transports)
	named("decline", declines)
	cases := []struct {
		got, want string
	}{
		{Transport(len(transportNames)).String(), fmt.Sprintf("transport(%d)", len(transportNames))},
		{Decline(len(declineNames)).String(), fmt.Sprintf("decline(%d)", len(declineNames))},
		{Flags(0).String(), "none"},
		{(FlagRDMAOnly | FlagHostBuffer).String(), "rdma_only|host_buffer"},
		{(FlagHTTPOnly | FlagDeclineIsError | 0x30).String(), "http_only|decline_is_error|0x30"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestCStringFields(t *testing.T) {
	r := NewReadRequest()
	if r.HostBufferName() != "" || r.Token() != "" {
		t.Fatalf("a new request has name %q, token %q", r.HostBufferName(), r.Token())
	}

	if err := r.SetHostBufferName("/dev/shm/a-much-longer-name"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetHostBufferName("/dev/shm/b"); err != nil {
		t.Fatal(err)
	}
	if got := r.HostBufferName(); got != "/dev/shm/b" {
		t.Fatalf("HostBufferName = %q: the shorter name must not keep the longer one's tail", got)
	}
	if r.Flags&FlagHostBuffer == 0 {
		t.Fatal("SetHostBufferName did not set FlagHostBuffer")
	}
	if err := r.SetHostBufferName(strings.Repeat("n", IPCHandleLen)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a 64-byte name left no room for the NUL, yet: %v", err)
	}
	if err := r.SetHostBufferName("a\x00b"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a name with a NUL inside: %v", err)
	}

	token := strings.Repeat("0123456789", 8) + "a" // 81 characters, the S3-over-RDMA token length
	if err := r.SetToken(token); err != nil {
		t.Fatal(err)
	}
	if r.Token() != token {
		t.Fatalf("Token = %q, want %q", r.Token(), token)
	}
	if err := r.SetToken(""); err != nil || r.Token() != "" {
		t.Fatalf("clearing the token: %v, left %q", err, r.Token())
	}
	if err := r.SetToken(strings.Repeat("t", TokenLen)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a 96-byte token: %v", err)
	}
}

func TestUnmarshalBinaryDoesNotValidate(t *testing.T) {
	r := sampleRequest()
	r.Version = 9
	var got ReadRequest
	if err := got.UnmarshalBinary(r.Encode()); err != nil {
		t.Fatalf("UnmarshalBinary: %v", err)
	}
	if got != r {
		t.Fatalf("got %+v, want %+v", got, r)
	}
	if err := got.UnmarshalBinary(make([]byte, 8)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("UnmarshalBinary of 8 bytes: %v", err)
	}
}
