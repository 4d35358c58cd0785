// Package rdmatoken is the x-amz-rdma-token wire format and the size limits
// of S3 over RDMA. It imports nothing of this module, so both the S3 access
// layer (objstore) and the GPU read engine (rdmaread) can use it.
package rdmatoken

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Header is the request header that carries a token.
const Header = "x-amz-rdma-token"

// Len is the length of a token: 7 fields of 16, 8, 8, 4, 6, 1 and 32 lowercase
// hex digits, joined by 6 colons.
const Len = 81

// Limits. The token's size field is 32 bits, and cuObject keeps the last
// 64 KiB of that range for itself, so one registration spans at most
// MaxRegistration bytes; cuObject's server side moves at most MaxServerOp
// bytes in one operation, so one GET with a token asks for no more.
const (
	MaxRegistration = 4<<30 - 64<<10
	MaxServerOp     = 1 << 30
)

// Token names a registered buffer of the reader's: where the server writes
// (Addr, Size, RKey) and how it reaches the reader's NIC (LID, DCT, GID).
type Token struct {
	Addr   uint64 // remote address of the buffer
	Size   uint32 // bytes the server may write from Addr
	RKey   uint32
	LID    uint16
	DCT    uint32 // DCT number; 24 bits on the wire (String drops higher bits)
	HasGID bool
	GID    [16]byte
}

// field describes one colon-separated field of the wire form.
type field struct {
	name  string
	width int
}

var fields = [7]field{
	{"addr", 16}, {"size", 8}, {"rkey", 8}, {"lid", 4}, {"dct", 6}, {"gid_present", 1}, {"gid", 32},
}

// String is the wire form: 81 lowercase hex characters in 7 fields.
func (t Token) String() string {
	gidFlag := 0
	if t.HasGID {
		gidFlag = 1
	}
	return fmt.Sprintf("%016x:%08x:%08x:%04x:%06x:%d:%032x",
		t.Addr, t.Size, t.RKey, t.LID, t.DCT&0xffffff, gidFlag, t.GID[:])
}

// ErrMalformed is wrapped by every error Parse returns.
var ErrMalformed = errors.New("malformed x-amz-rdma-token")

// FieldError names the field of a token that is wrong.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrMalformed, e.Field, e.Reason)
}

func (e *FieldError) Unwrap() error { return ErrMalformed }

// Parse reads a token in exactly the wire form String writes. Anything else
// is refused, the older 115-character form (token + ":addr:size") included:
// servers that know the 81-character form answer it with 500.
func Parse(s string) (Token, error) {
	parts := strings.Split(s, ":")
	if len(parts) != len(fields) {
		reason := fmt.Sprintf("%d fields, want 7", len(parts))
		if len(s) == 115 && len(parts) == 9 {
			reason += " (the older 115-character form with :addr:size appended)"
		}
		return Token{}, &FieldError{Field: "token", Reason: reason}
	}
	for i, p := range parts {
		f := fields[i]
		if len(p) != f.width {
			return Token{}, &FieldError{Field: f.name, Reason: fmt.Sprintf("%d characters, want %d", len(p), f.width)}
		}
		for _, c := range []byte(p) {
			if !isLowerHex(c) {
				return Token{}, &FieldError{Field: f.name, Reason: fmt.Sprintf("%q is not lowercase hex", c)}
			}
		}
	}
	var t Token
	t.Addr = mustHex(parts[0], 64)
	t.Size = uint32(mustHex(parts[1], 32))
	t.RKey = uint32(mustHex(parts[2], 32))
	t.LID = uint16(mustHex(parts[3], 16))
	t.DCT = uint32(mustHex(parts[4], 32))
	switch parts[5] {
	case "1":
		t.HasGID = true
	case "0":
	default:
		return Token{}, &FieldError{Field: "gid_present", Reason: fmt.Sprintf("%q, want 0 or 1", parts[5])}
	}
	for i := range t.GID {
		t.GID[i] = byte(mustHex(parts[6][2*i:2*i+2], 8))
	}
	return t, nil
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// mustHex parses digits already checked to be hex and to fit bits.
func mustHex(s string, bits int) uint64 {
	v, err := strconv.ParseUint(s, 16, bits)
	if err != nil {
		panic(err)
	}
	return v
}

// Part is one piece of a read: Len bytes at object offset Off.
type Part struct {
	Off, Len int64
}

// SplitRange splits the n bytes at object offset off into consecutive parts
// of at most size bytes (at most MaxServerOp, which size <= 0 means), each
// sent as one GET with its own token.
//
// The registration limit applies per part as well: each part's token names
// one registration, which must cover the part and stay within
// MaxRegistration. Since MaxServerOp < MaxRegistration, a part always fits
// one registration; a destination larger than MaxRegistration needs several.
func SplitRange(off, n, size int64) []Part {
	if n <= 0 || off < 0 {
		return nil
	}
	if size <= 0 || size > MaxServerOp {
		size = MaxServerOp
	}
	parts := make([]Part, 0, (n+size-1)/size)
	for n > 0 {
		l := min(n, size)
		parts = append(parts, Part{Off: off, Len: l})
		off += l
		n -= l
	}
	return parts
}
