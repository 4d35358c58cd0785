/* s3gds cuObject shim: a C ABI over NVIDIA's cuObjClient C++ class, so that
 * s3gdsfs (Go, no cgo) can dlopen it as it dlopens libs3rdma.
 *
 * NOT BUILT OR VERIFIED AGAINST CUOBJECT HERE: no machine this project builds on has
 * libcuobjclient. See README.md for what building and checking it needs.
 *
 * The functions follow libs3rdma's client API (s3rdma.h) in shape:
 * 0 on success and -1 on failure, tokens as NUL-terminated strings the
 * caller returns with s3gds_cuobj_free_token. */
#ifndef S3GDS_CUOBJ_SHIM_H
#define S3GDS_CUOBJ_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void *s3gds_cuobj_client;

/* Memory types, as cuObjMemoryType_t numbers them. */
#define S3GDS_CUOBJ_MEM_SYSTEM 0
#define S3GDS_CUOBJ_MEM_CUDA_MANAGED 1
#define S3GDS_CUOBJ_MEM_CUDA_DEVICE 2
#define S3GDS_CUOBJ_MEM_UNKNOWN 3
#define S3GDS_CUOBJ_MEM_INVALID 4

/* Largest registration cuMemObjGetDescriptor accepts: 4 GiB - 64 KiB. */
#define S3GDS_CUOBJ_MAX_REGISTRATION (4ULL * 1024 * 1024 * 1024 - 64 * 1024)

/* Creates a cuObjClient (protocol CUOBJ_PROTO_RDMA_DC_V1, no callbacks:
 * only the explicit-token calls are used). NULL on failure, with the reason
 * in err_buf (NUL-terminated, truncated to err_buf_len-1; may be NULL). */
s3gds_cuobj_client s3gds_cuobj_client_init(char *err_buf, size_t err_buf_len);

/* Destroys the client; registrations must have been released. NULL is a no-op. */
void s3gds_cuobj_client_free(s3gds_cuobj_client c);

/* 1 when the client is connected (cuObjClient::isConnected), else 0. */
int s3gds_cuobj_client_ready(s3gds_cuobj_client c);

/* cuMemObjGetDescriptor(ptr, size): registers host or CUDA device memory
 * (not managed memory) for RDMA. The memory must stay valid until
 * s3gds_cuobj_client_deregister(ptr). */
int s3gds_cuobj_client_register(s3gds_cuobj_client c, void *ptr, size_t size);

/* cuMemObjPutDescriptor(ptr): ptr must be the one registered; call it
 * after every transfer into the memory has completed. */
int s3gds_cuobj_client_deregister(s3gds_cuobj_client c, void *ptr);

/* cuMemObjGetRDMAToken(ptr, size, offset, op, &token): a token naming
 * [ptr+offset, ptr+offset+size) of the region registered at ptr (ptr is
 * the registered base, not an offset pointer). is_put selects CUOBJ_PUT
 * (server reads) over CUOBJ_GET (server writes). On success *token_out is
 * the library's string; return it with s3gds_cuobj_client_free_token. */
int s3gds_cuobj_client_get_token(s3gds_cuobj_client c, void *ptr, size_t size, size_t offset, int is_put,
                                 char **token_out);

/* cuMemObjPutRDMAToken(token). */
void s3gds_cuobj_client_free_token(s3gds_cuobj_client c, char *token);

/* cuObjClient::getMemoryType(ptr), as S3GDS_CUOBJ_MEM_*. */
int s3gds_cuobj_client_memory_type(const void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* S3GDS_CUOBJ_SHIM_H */
