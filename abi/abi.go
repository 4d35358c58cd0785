// Package abi is the binary contract between s3gdsfs and the processes that read
// and write through it: the S3GDS_IOC_READ and S3GDS_IOC_WRITE ioctls' request
// (struct s3gds_read in client/c/s3gds.h), its flags, transports and decline reasons, and the names of
// the extended attributes. docs/ioctl.md describes the semantics.
//
// Linux FUSE forwards only "restricted" ioctls to a filesystem: one fixed-size
// struct whose size is encoded in the command number and which the kernel copies
// in and out without following pointers. The request therefore holds no pointers,
// and its layout is fixed: 256 bytes, little-endian, no padding.
package abi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Version is the ABI version callers put in ReadRequest.Version.
const Version = 1

// Size is sizeof(struct s3gds_read); callers put it in ReadRequest.Size.
const Size = 256

// Widths of the two byte arrays of the request.
const (
	IPCHandleLen = 64 // a CUDA IPC handle (cuIpcMemHandle)
	TokenLen     = 96 // room for an 81-character S3-over-RDMA token and its NUL
)

// The ioctl command number layout of asm-generic/ioctl.h, which x86-64 uses.
const (
	iocNrShift   = 0
	iocTypeShift = 8
	iocSizeShift = 16
	iocDirShift  = 30
	iocSizeBits  = 14

	iocWrite = 1
	iocRead  = 2
)

// IocRead is S3GDS_IOC_READ, _IOWR('S', 0x01, struct s3gds_read).
const IocRead uint32 = (iocRead|iocWrite)<<iocDirShift | Size<<iocSizeShift | 'S'<<iocTypeShift | 0x01<<iocNrShift

// IocWrite is S3GDS_IOC_WRITE, _IOWR('S', 0x02, struct s3gds_read): the same
// request, read the other way: Length bytes of the buffer at DstOffset are
// written at file offset Offset of a file open for writing.
const IocWrite uint32 = (iocRead|iocWrite)<<iocDirShift | Size<<iocSizeShift | 'S'<<iocTypeShift | 0x02<<iocNrShift

// IOWR computes _IOWR(typ, nr, size) as <linux/ioctl.h> does; size must fit in 14 bits.
func IOWR(typ, nr byte, size uint32) uint32 {
	if size >= 1<<iocSizeBits {
		panic(fmt.Sprintf("abi: ioctl argument of %d bytes does not fit the command number", size))
	}
	return (iocRead|iocWrite)<<iocDirShift | size<<iocSizeShift | uint32(typ)<<iocTypeShift | uint32(nr)<<iocNrShift
}

// Extended attributes s3gdsfs answers with getxattr(2).
const (
	XattrCaps  = "user.s3gdsfs.caps"  // JSON Caps, on the mount root
	XattrETag  = "user.s3gdsfs.etag"  // the object's ETag, on files
	XattrStats = "user.s3gdsfs.stats" // JSON counters, on files and on the mount root
)

// Flags select how a read may be carried.
type Flags uint32

const (
	FlagRDMAOnly       Flags = 1 // fail rather than fall back to HTTP
	FlagHTTPOnly       Flags = 2 // never try RDMA
	FlagHostBuffer     Flags = 4 // IPCHandle names a host stand-in buffer under /dev/shm (tests)
	FlagDeclineIsError Flags = 8 // a declined RDMA transfer fails with ECANCELED instead of falling back

	knownFlags = FlagRDMAOnly | FlagHTTPOnly | FlagHostBuffer | FlagDeclineIsError
)

var flagNames = []struct {
	flag Flags
	name string
}{
	{FlagRDMAOnly, "rdma_only"},
	{FlagHTTPOnly, "http_only"},
	{FlagHostBuffer, "host_buffer"},
	{FlagDeclineIsError, "decline_is_error"},
}

// String names the set flags, "rdma_only|host_buffer"; unknown bits appear in hex.
func (f Flags) String() string {
	if f == 0 {
		return "none"
	}
	var names []string
	for _, n := range flagNames {
		if f&n.flag != 0 {
			names = append(names, n.name)
		}
	}
	if rest := f &^ knownFlags; rest != 0 {
		names = append(names, fmt.Sprintf("0x%x", uint32(rest)))
	}
	return strings.Join(names, "|")
}

// Transport says how the bytes of a read were carried.
type Transport uint32

const (
	TransportNone Transport = 0 // nothing was carried (length 0, or at EOF)
	TransportHTTP Transport = 1 // ranged GETs into pinned memory, then a device copy
	TransportRDMA Transport = 2 // the server wrote into the buffer over RDMA
)

var transportNames = [...]string{TransportNone: "none", TransportHTTP: "http", TransportRDMA: "rdma"}

func (t Transport) String() string {
	if int(t) < len(transportNames) {
		return transportNames[t]
	}
	return fmt.Sprintf("transport(%d)", uint32(t))
}

// Decline is why an RDMA transfer was not used (or not used for every byte).
type Decline uint32

const (
	DeclineNone               Decline = 0
	DeclineRegistrationFailed Decline = 1 // the buffer could not be registered with the NIC
	DeclineTooLarge           Decline = 2 // beyond what one registration or one RDMA operation may span
	DeclineServer501          Decline = 3 // the server answered 501: no RDMA for this request
	DeclineTokenIgnored       Decline = 4 // the server sent the body over HTTP, ignoring the token
	DeclineShortTransfer      Decline = 5 // the server reported fewer RDMA bytes than asked for
	DeclineRDMAError          Decline = 6 // the RDMA operation failed
	DeclineTimeout            Decline = 7 // the RDMA operation did not finish in time
	DeclineTokenRejected      Decline = 8 // the caller's token was malformed or refused
	DeclineRDMAUnavailable    Decline = 9 // no RDMA fabric or token minter on this host
)

var declineNames = [...]string{
	DeclineNone:               "none",
	DeclineRegistrationFailed: "registration_failed",
	DeclineTooLarge:           "too_large",
	DeclineServer501:          "server_501",
	DeclineTokenIgnored:       "token_ignored",
	DeclineShortTransfer:      "short_transfer",
	DeclineRDMAError:          "rdma_error",
	DeclineTimeout:            "timeout",
	DeclineTokenRejected:      "token_rejected",
	DeclineRDMAUnavailable:    "rdma_unavailable",
}

func (d Decline) String() string {
	if int(d) < len(declineNames) {
		return declineNames[d]
	}
	return fmt.Sprintf("decline(%d)", uint32(d))
}

// ReadRequest is struct s3gds_read. Its fields are in the C order with the C
// widths, so the Go struct has the same offsets as the C one; Encode and
// UnmarshalBinary convert to and from the wire bytes.
type ReadRequest struct {
	// In.
	Size      uint32 // Size
	Version   uint32 // Version
	Flags     Flags
	Device    int32  // CUDA device ordinal
	Offset    uint64 // object offset
	Length    uint64 // bytes to read; 0 reads nothing
	DstOffset uint64 // offset inside the allocation that IPCHandle names
	// IPCHandle is the CUDA IPC handle of the allocation's base; with
	// FlagHostBuffer, the NUL-terminated path of a host stand-in buffer.
	IPCHandle [IPCHandleLen]byte
	RDMAToken [TokenLen]byte // optional caller-minted token, NUL-terminated

	// Out.
	Bytes     uint64 // bytes delivered, short at EOF
	ElapsedNs uint64
	Transport Transport
	Decline   Decline
	RDMABytes uint64 // of Bytes, how many came over RDMA
	HTTPBytes uint64 // of Bytes, how many came over HTTP

	Reserved [2]uint64 // zero
}

// NewReadRequest returns a request with Size and Version filled in.
func NewReadRequest() ReadRequest {
	return ReadRequest{Size: Size, Version: Version}
}

// ErrInvalid is wrapped by every validation error; the daemon answers it with EINVAL.
var ErrInvalid = errors.New("invalid s3gds request")

// FieldError says which field of a request is invalid and why.
type FieldError struct {
	Field  string // the C member name, "flags", "reserved[1]"
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrInvalid, e.Field, e.Reason)
}

func (e *FieldError) Unwrap() error { return ErrInvalid }

// Decode parses and validates a request as the daemon receives it.
func Decode(buf []byte) (ReadRequest, error) {
	var r ReadRequest
	if err := r.UnmarshalBinary(buf); err != nil {
		return ReadRequest{}, err
	}
	if err := r.Validate(); err != nil {
		return ReadRequest{}, err
	}
	return r, nil
}

// UnmarshalBinary fills r from the wire bytes without validating them; a
// client reads the out fields this way after the ioctl.
func (r *ReadRequest) UnmarshalBinary(buf []byte) error {
	if len(buf) != Size {
		return &FieldError{"size", fmt.Sprintf("buffer holds %d bytes, want %d", len(buf), Size)}
	}
	d := decoder{buf}
	r.Size = d.uint32()
	r.Version = d.uint32()
	r.Flags = Flags(d.uint32())
	r.Device = int32(d.uint32())
	r.Offset = d.uint64()
	r.Length = d.uint64()
	r.DstOffset = d.uint64()
	d.bytes(r.IPCHandle[:])
	d.bytes(r.RDMAToken[:])
	r.Bytes = d.uint64()
	r.ElapsedNs = d.uint64()
	r.Transport = Transport(d.uint32())
	r.Decline = Decline(d.uint32())
	r.RDMABytes = d.uint64()
	r.HTTPBytes = d.uint64()
	for i := range r.Reserved {
		r.Reserved[i] = d.uint64()
	}
	return nil
}

// Validate checks the in fields; the out fields may hold anything, since
// callers reuse one struct across calls.
func (r *ReadRequest) Validate() error {
	if r.Size != Size {
		return &FieldError{"size", fmt.Sprintf("%d, want %d", r.Size, Size)}
	}
	if r.Version != Version {
		return &FieldError{"version", fmt.Sprintf("%d, this daemon speaks %d", r.Version, Version)}
	}
	if unknown := r.Flags &^ knownFlags; unknown != 0 {
		return &FieldError{"flags", fmt.Sprintf("unknown bits 0x%x", uint32(unknown))}
	}
	if r.Flags&(FlagRDMAOnly|FlagHTTPOnly) == FlagRDMAOnly|FlagHTTPOnly {
		return &FieldError{"flags", "rdma_only and http_only exclude each other"}
	}
	for i, v := range r.Reserved {
		if v != 0 {
			return &FieldError{fmt.Sprintf("reserved[%d]", i), "must be zero"}
		}
	}
	if bytes.IndexByte(r.RDMAToken[:], 0) < 0 {
		return &FieldError{"rdma_token", fmt.Sprintf("no NUL within %d bytes", TokenLen)}
	}
	if r.Flags&FlagHostBuffer != 0 {
		switch bytes.IndexByte(r.IPCHandle[:], 0) {
		case -1:
			return &FieldError{"ipc_handle", fmt.Sprintf("host buffer name has no NUL within %d bytes", IPCHandleLen)}
		case 0:
			return &FieldError{"ipc_handle", "host buffer name is empty"}
		}
	}
	return nil
}

// Encode returns the wire bytes of r.
func (r *ReadRequest) Encode() []byte {
	le := binary.LittleEndian
	b := make([]byte, 0, Size)
	b = le.AppendUint32(b, r.Size)
	b = le.AppendUint32(b, r.Version)
	b = le.AppendUint32(b, uint32(r.Flags))
	b = le.AppendUint32(b, uint32(r.Device))
	b = le.AppendUint64(b, r.Offset)
	b = le.AppendUint64(b, r.Length)
	b = le.AppendUint64(b, r.DstOffset)
	b = append(b, r.IPCHandle[:]...)
	b = append(b, r.RDMAToken[:]...)
	b = le.AppendUint64(b, r.Bytes)
	b = le.AppendUint64(b, r.ElapsedNs)
	b = le.AppendUint32(b, uint32(r.Transport))
	b = le.AppendUint32(b, uint32(r.Decline))
	b = le.AppendUint64(b, r.RDMABytes)
	b = le.AppendUint64(b, r.HTTPBytes)
	for _, v := range r.Reserved {
		b = le.AppendUint64(b, v)
	}
	return b
}

// HostBufferName is the NUL-terminated string in IPCHandle, meaningful with FlagHostBuffer.
func (r *ReadRequest) HostBufferName() string { return cString(r.IPCHandle[:]) }

// Token is the caller's RDMA token, "" when none.
func (r *ReadRequest) Token() string { return cString(r.RDMAToken[:]) }

// SetHostBufferName puts a host stand-in buffer's path in IPCHandle and sets FlagHostBuffer.
func (r *ReadRequest) SetHostBufferName(path string) error {
	if err := putCString(r.IPCHandle[:], path, "ipc_handle"); err != nil {
		return err
	}
	r.Flags |= FlagHostBuffer
	return nil
}

// SetToken puts a caller-minted RDMA token in RDMAToken; "" clears it.
func (r *ReadRequest) SetToken(token string) error {
	return putCString(r.RDMAToken[:], token, "rdma_token")
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func putCString(dst []byte, s, field string) error {
	if len(s) >= len(dst) {
		return &FieldError{field, fmt.Sprintf("%d bytes do not fit in %d with the NUL", len(s), len(dst))}
	}
	if strings.IndexByte(s, 0) >= 0 {
		return &FieldError{field, "contains a NUL byte"}
	}
	clear(dst)
	copy(dst, s)
	return nil
}

// decoder reads the fields of a request in order.
type decoder struct{ b []byte }

func (d *decoder) uint32() uint32 {
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) uint64() uint64 {
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) bytes(dst []byte) {
	d.b = d.b[copy(dst, d.b):]
}
