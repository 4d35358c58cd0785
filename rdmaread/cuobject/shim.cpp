// s3gds cuObject shim: extern "C" wrappers over cuObjClient (shim.h).
//
// NOT BUILT OR VERIFIED AGAINST CUOBJECT HERE (no libcuobjclient on these machines).
// Build against CUDA Toolkit 13.1.1+ with the cuObject client packages:
//   g++ -std=c++17 -O2 -fPIC -shared -o libs3gds_cuobj.so shim.cpp
//       -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuobjclient
// (one command line).
// The API used is the cuObjClient API Specification v1.0.0
// (docs.nvidia.com/gpudirect-storage/cuobject/cuObjClient-api).

#include "shim.h"

#include <cuobjclient.h>

#include <cstring>
#include <mutex>
#include <new>

namespace {

// The client keeps a reference to its ops, so they live beside it.
struct Client {
    CUObjOps_t ops{};
    cuObjClient *client = nullptr;
    // cuObjClient's thread safety for the explicit-token calls is not
    // documented; one lock keeps the shim correct until it is known.
    std::mutex mu;
};

void set_err(char *buf, size_t len, const char *msg) {
    if (buf != nullptr && len > 0) {
        std::strncpy(buf, msg, len - 1);
        buf[len - 1] = '\0';
    }
}

Client *from(s3gds_cuobj_client c) { return static_cast<Client *>(c); }

}  // namespace

extern "C" {

s3gds_cuobj_client s3gds_cuobj_client_init(char *err_buf, size_t err_buf_len) {
    Client *c = new (std::nothrow) Client;
    if (c == nullptr) {
        set_err(err_buf, err_buf_len, "out of memory");
        return nullptr;
    }
    // No callbacks: s3gdsfs sends its own requests with tokens from
    // cuMemObjGetRDMAToken and never calls cuObjGet or cuObjPut.
    c->ops.get = nullptr;
    c->ops.put = nullptr;
    try {
        c->client = new cuObjClient(c->ops, CUOBJ_PROTO_RDMA_DC_V1);
    } catch (...) {
        c->client = nullptr;
    }
    if (c->client == nullptr || !c->client->isConnected()) {
        set_err(err_buf, err_buf_len,
                "cuObjClient is not connected (check cufile.json rdma_dev_addr_list and libcufile >= 1.18)");
        delete c->client;
        delete c;
        return nullptr;
    }
    return c;
}

void s3gds_cuobj_client_free(s3gds_cuobj_client h) {
    Client *c = from(h);
    if (c == nullptr) return;
    delete c->client;
    delete c;
}

int s3gds_cuobj_client_ready(s3gds_cuobj_client h) {
    Client *c = from(h);
    if (c == nullptr) return 0;
    std::lock_guard<std::mutex> lock(c->mu);
    return c->client->isConnected() ? 1 : 0;
}

int s3gds_cuobj_client_register(s3gds_cuobj_client h, void *ptr, size_t size) {
    Client *c = from(h);
    if (c == nullptr || ptr == nullptr || size == 0 || size > S3GDS_CUOBJ_MAX_REGISTRATION) return -1;
    std::lock_guard<std::mutex> lock(c->mu);
    return c->client->cuMemObjGetDescriptor(ptr, size) == CU_OBJ_SUCCESS ? 0 : -1;
}

int s3gds_cuobj_client_deregister(s3gds_cuobj_client h, void *ptr) {
    Client *c = from(h);
    if (c == nullptr || ptr == nullptr) return -1;
    std::lock_guard<std::mutex> lock(c->mu);
    // cuMemObjPutDescriptor reports no failure through its return value.
    return c->client->cuMemObjPutDescriptor(ptr) == CU_OBJ_SUCCESS ? 0 : -1;
}

int s3gds_cuobj_client_get_token(s3gds_cuobj_client h, void *ptr, size_t size, size_t offset, int is_put,
                                 char **token_out) {
    if (token_out == nullptr) return -1;
    *token_out = nullptr;
    Client *c = from(h);
    if (c == nullptr || ptr == nullptr || size == 0) return -1;
    char *desc = nullptr;
    std::lock_guard<std::mutex> lock(c->mu);
    cuObjErr_t rc = c->client->cuMemObjGetRDMAToken(ptr, size, offset, is_put ? CUOBJ_PUT : CUOBJ_GET, &desc);
    if (rc != CU_OBJ_SUCCESS || desc == nullptr) return -1;
    *token_out = desc;
    return 0;
}

void s3gds_cuobj_client_free_token(s3gds_cuobj_client h, char *token) {
    Client *c = from(h);
    if (c == nullptr || token == nullptr) return;
    std::lock_guard<std::mutex> lock(c->mu);
    c->client->cuMemObjPutRDMAToken(token);
}

int s3gds_cuobj_client_memory_type(const void *ptr) {
    return static_cast<int>(cuObjClient::getMemoryType(ptr));
}

}  // extern "C"
