/*
 * s3gds.h - the S3GDS_IOC_READ ioctl of s3gdsfs.
 *
 * Open a file of an s3gdsfs mount, fill a struct s3gds_read and call
 * ioctl(fd, S3GDS_IOC_READ, &req): the daemon makes the object bytes land in the
 * CUDA allocation named by req.ipc_handle, and reports how they travelled.
 * docs/ioctl.md is the contract; abi/abi.go is the daemon's side of it.
 *
 * Linux FUSE forwards only ioctls whose argument is one fixed-size struct, so
 * the struct holds no pointers. Layout: 256 bytes, little-endian, no padding.
 */
#ifndef S3GDS_H
#define S3GDS_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <linux/ioctl.h>

#ifdef __cplusplus
extern "C" {
#define S3GDS_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define S3GDS_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#define S3GDS_ABI_VERSION 1

#define S3GDS_IPC_HANDLE_LEN 64
#define S3GDS_TOKEN_LEN 96

/* flags */
#define S3GDS_F_RDMA_ONLY 1u        /* fail rather than fall back to HTTP */
#define S3GDS_F_HTTP_ONLY 2u        /* never try RDMA */
#define S3GDS_F_HOST_BUFFER 4u      /* ipc_handle holds the path of a host stand-in buffer under /dev/shm (tests) */
#define S3GDS_F_DECLINE_IS_ERROR 8u /* a declined RDMA transfer fails with ECANCELED instead of falling back */

/* extended attributes, read with getxattr(2) */
#define S3GDS_XATTR_CAPS "user.s3gdsfs.caps"   /* JSON, on the mount root */
#define S3GDS_XATTR_ETAG "user.s3gdsfs.etag"   /* on files */
#define S3GDS_XATTR_STATS "user.s3gdsfs.stats" /* JSON counters, on files and the mount root */

enum s3gds_transport {
	S3GDS_TRANSPORT_NONE = 0,
	S3GDS_TRANSPORT_HTTP = 1,
	S3GDS_TRANSPORT_RDMA = 2,
};

enum s3gds_decline {
	S3GDS_DECLINE_NONE = 0,
	S3GDS_DECLINE_REGISTRATION_FAILED = 1,
	S3GDS_DECLINE_TOO_LARGE = 2,
	S3GDS_DECLINE_SERVER_501 = 3,
	S3GDS_DECLINE_TOKEN_IGNORED = 4,
	S3GDS_DECLINE_SHORT_TRANSFER = 5,
	S3GDS_DECLINE_RDMA_ERROR = 6,
	S3GDS_DECLINE_TIMEOUT = 7,
	S3GDS_DECLINE_TOKEN_REJECTED = 8,
	S3GDS_DECLINE_RDMA_UNAVAILABLE = 9,
};

struct s3gds_read {
	/* in */
	uint32_t size;        /* sizeof(struct s3gds_read) */
	uint32_t version;     /* S3GDS_ABI_VERSION */
	uint32_t flags;       /* S3GDS_F_* */
	int32_t device;       /* CUDA device ordinal */
	uint64_t offset;      /* object offset */
	uint64_t length;      /* bytes to read; 0 reads nothing */
	uint64_t dst_offset;  /* byte offset inside the allocation named by ipc_handle */
	uint8_t ipc_handle[S3GDS_IPC_HANDLE_LEN]; /* cuIpcMemHandle of the allocation's base */
	char rdma_token[S3GDS_TOKEN_LEN];         /* optional caller-minted token, NUL-terminated; "" = none */
	/* out, written only when the ioctl returns 0 */
	uint64_t bytes;       /* bytes delivered (short at EOF) */
	uint64_t elapsed_ns;
	uint32_t transport;   /* enum s3gds_transport */
	uint32_t decline;     /* enum s3gds_decline */
	uint64_t rdma_bytes;  /* of bytes, how many came over RDMA */
	uint64_t http_bytes;  /* of bytes, how many came over HTTP */
	uint64_t reserved[2]; /* zero */
};

#define S3GDS_IOC_READ _IOWR('S', 0x01, struct s3gds_read) /* 0xC1005301 */
/* The same request the other way: length bytes of the buffer at dst_offset are
 * written at file offset offset (the bytes written so far) of a file open for
 * writing; bytes says how many were taken. */
#define S3GDS_IOC_WRITE _IOWR('S', 0x02, struct s3gds_read) /* 0xC1005302 */

/* The wire layout: offset and size of every member, no padding. */
#define S3GDS_MEMBER_SIZE(member) sizeof(((struct s3gds_read *)0)->member)
S3GDS_STATIC_ASSERT(sizeof(struct s3gds_read) == 256, "sizeof(struct s3gds_read)");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, size) == 0, "size");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(size) == 4, "size");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, version) == 4, "version");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(version) == 4, "version");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, flags) == 8, "flags");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(flags) == 4, "flags");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, device) == 12, "device");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(device) == 4, "device");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, offset) == 16, "offset");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(offset) == 8, "offset");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, length) == 24, "length");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(length) == 8, "length");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, dst_offset) == 32, "dst_offset");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(dst_offset) == 8, "dst_offset");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, ipc_handle) == 40, "ipc_handle");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(ipc_handle) == 64, "ipc_handle");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, rdma_token) == 104, "rdma_token");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(rdma_token) == 96, "rdma_token");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, bytes) == 200, "bytes");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(bytes) == 8, "bytes");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, elapsed_ns) == 208, "elapsed_ns");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(elapsed_ns) == 8, "elapsed_ns");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, transport) == 216, "transport");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(transport) == 4, "transport");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, decline) == 220, "decline");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(decline) == 4, "decline");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, rdma_bytes) == 224, "rdma_bytes");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(rdma_bytes) == 8, "rdma_bytes");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, http_bytes) == 232, "http_bytes");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(http_bytes) == 8, "http_bytes");
S3GDS_STATIC_ASSERT(offsetof(struct s3gds_read, reserved) == 240, "reserved");
S3GDS_STATIC_ASSERT(S3GDS_MEMBER_SIZE(reserved) == 16, "reserved");

/* Fills the in fields every request needs; the rest is zero. */
static inline void s3gds_read_init(struct s3gds_read *req)
{
	memset(req, 0, sizeof(*req));
	req->size = sizeof(struct s3gds_read);
	req->version = S3GDS_ABI_VERSION;
}

static inline const char *s3gds_transport_name(uint32_t transport)
{
	switch (transport) {
	case S3GDS_TRANSPORT_NONE: return "none";
	case S3GDS_TRANSPORT_HTTP: return "http";
	case S3GDS_TRANSPORT_RDMA: return "rdma";
	}
	return "unknown";
}

static inline const char *s3gds_decline_name(uint32_t decline)
{
	switch (decline) {
	case S3GDS_DECLINE_NONE: return "none";
	case S3GDS_DECLINE_REGISTRATION_FAILED: return "registration_failed";
	case S3GDS_DECLINE_TOO_LARGE: return "too_large";
	case S3GDS_DECLINE_SERVER_501: return "server_501";
	case S3GDS_DECLINE_TOKEN_IGNORED: return "token_ignored";
	case S3GDS_DECLINE_SHORT_TRANSFER: return "short_transfer";
	case S3GDS_DECLINE_RDMA_ERROR: return "rdma_error";
	case S3GDS_DECLINE_TIMEOUT: return "timeout";
	case S3GDS_DECLINE_TOKEN_REJECTED: return "token_rejected";
	case S3GDS_DECLINE_RDMA_UNAVAILABLE: return "rdma_unavailable";
	}
	return "unknown";
}

#ifdef __cplusplus
}
#endif

#endif /* S3GDS_H */
