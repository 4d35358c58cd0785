"""struct s3gds_read and its constants, as client/c/s3gds.h and abi/abi.go define them."""

import struct

ABI_VERSION = 1
STRUCT_SIZE = 256
IPC_HANDLE_LEN = 64
TOKEN_LEN = 96

# _IOWR('S', 0x01, struct s3gds_read)
IOC_READ = (3 << 30) | (STRUCT_SIZE << 16) | (ord("S") << 8) | 0x01
# _IOWR('S', 0x02, struct s3gds_read): the same struct, the buffer written into a file
IOC_WRITE = (3 << 30) | (STRUCT_SIZE << 16) | (ord("S") << 8) | 0x02

FLAG_RDMA_ONLY = 1  # fail rather than fall back to HTTP
FLAG_HTTP_ONLY = 2  # never try RDMA
FLAG_HOST_BUFFER = 4  # ipc_handle holds the path of a host stand-in buffer (tests)
FLAG_DECLINE_IS_ERROR = 8  # a declined RDMA transfer fails with ECANCELED
KNOWN_FLAGS = FLAG_RDMA_ONLY | FLAG_HTTP_ONLY | FLAG_HOST_BUFFER | FLAG_DECLINE_IS_ERROR

# Index = the value in the struct.
TRANSPORTS = (None, "http", "rdma")
DECLINE_REASONS = (
    None,
    "registration_failed",
    "too_large",
    "server_501",
    "token_ignored",
    "short_transfer",
    "rdma_error",
    "timeout",
    "token_rejected",
    "rdma_unavailable",
)

XATTR_CAPS = "user.s3gdsfs.caps"
XATTR_ETAG = "user.s3gdsfs.etag"
XATTR_STATS = "user.s3gdsfs.stats"

# Members in order with their struct codes; "<" means little-endian, no padding.
FIELDS = (
    ("size", "I"),
    ("version", "I"),
    ("flags", "I"),
    ("device", "i"),
    ("offset", "Q"),
    ("length", "Q"),
    ("dst_offset", "Q"),
    ("ipc_handle", "64s"),
    ("rdma_token", "96s"),
    ("bytes", "Q"),
    ("elapsed_ns", "Q"),
    ("transport", "I"),
    ("decline", "I"),
    ("rdma_bytes", "Q"),
    ("http_bytes", "Q"),
    ("reserved", "2Q"),
)
FORMAT = "<" + "".join(code for _, code in FIELDS)
assert struct.calcsize(FORMAT) == STRUCT_SIZE, struct.calcsize(FORMAT)


def field_offsets():
    """{member: (offset, size)} derived from FIELDS."""
    offsets, at = {}, 0
    for name, code in FIELDS:
        size = struct.calcsize("<" + code)
        offsets[name] = (at, size)
        at += size
    return offsets


def pack_request(*, flags, device, offset, length, dst_offset, ipc_handle, rdma_token=b""):
    """The request bytes, out fields and reserved zero."""
    if len(ipc_handle) > IPC_HANDLE_LEN:
        raise ValueError(f"ipc_handle is {len(ipc_handle)} bytes, at most {IPC_HANDLE_LEN}")
    if len(rdma_token) >= TOKEN_LEN:
        raise ValueError(f"rdma_token is {len(rdma_token)} bytes, at most {TOKEN_LEN - 1}")
    return bytearray(struct.pack(
        FORMAT, STRUCT_SIZE, ABI_VERSION, flags, device, offset, length, dst_offset,
        bytes(ipc_handle), bytes(rdma_token), 0, 0, 0, 0, 0, 0, 0, 0))


def unpack_outputs(buf):
    """(bytes, elapsed_ns, transport, decline, rdma_bytes, http_bytes) from a request after the ioctl."""
    values = struct.unpack(FORMAT, buf)
    return values[9:15]
