// fakes3rdma.c: a stand-in for libs3rdma.so with the same client C API
// (minio/minio-cpp vendor/s3rdma/include/s3rdma.h), for testing the Go
// binding on machines without an RDMA NIC. It pins nothing and moves no
// bytes: it keeps the books a real library keeps (handles, registrations
// reference-counted per address, tokens it has handed out, rails) and mints
// tokens in the real 81-character format.
//
// Built by the tests: gcc -shared -fPIC -o libs3rdma.so fakes3rdma.c
//   -DFAKE_S3RDMA_OLD  leaves out nic_count, healthy_nic_count and
//                      report_token_failure, as older releases did.
//   -DFAKE_S3RDMA_NO_GET_TOKEN  leaves out s3rdma_client_get_token (a broken build).
// FAKE_S3RDMA_FAIL_REGISTER=1 in the environment (read by each register
// call) makes registration fail, as ibv_reg_mr does on memory it cannot pin.

#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HANDLES 64
#define MAX_REGS 1024
#define MAX_TOKENS 4096
#define RAILS 2
#define MAX_REG_SIZE 0xffffffffULL /* the token's size field is 32 bits */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static uintptr_t handles[MAX_HANDLES]; /* live client ids; 0 = free slot */
static uintptr_t next_handle = 0x5300;

struct reg {
    uintptr_t ptr;
    size_t size;
    int refs;
    uint32_t rkey;
};
static struct reg regs[MAX_REGS];
static uint32_t next_rkey = 0x5a000001;

static char *tokens[MAX_TOKENS]; /* handed out, not yet freed */
static int rail_down[RAILS];
static unsigned next_rail __attribute__((unused)); /* unused without get_token */

/* Counters the tests read. */
static long register_calls, deregister_calls, token_calls, bad_frees, failure_reports;
static int fail_register, fail_token;

static int live_handle(void *h) {
    for (int i = 0; i < MAX_HANDLES; i++)
        if (handles[i] != 0 && handles[i] == (uintptr_t)h) return 1;
    return 0;
}

static struct reg *find_reg(uintptr_t ptr) {
    for (int i = 0; i < MAX_REGS; i++)
        if (regs[i].refs > 0 && regs[i].ptr == ptr) return &regs[i];
    return NULL;
}

static void set_err(char *buf, size_t len, const char *msg) {
    if (buf != NULL && len > 0) {
        strncpy(buf, msg, len - 1);
        buf[len - 1] = 0;
    }
}

void *s3rdma_client_init(const char *device, char *err_buf, size_t err_buf_len) {
    if (device != NULL && strcmp(device, "mlx5_missing") == 0) {
        set_err(err_buf, err_buf_len, "no RDMA device mlx5_missing with an ACTIVE port");
        return NULL;
    }
    pthread_mutex_lock(&mu);
    void *h = NULL;
    for (int i = 0; i < MAX_HANDLES; i++) {
        if (handles[i] == 0) {
            handles[i] = next_handle++;
            h = (void *)handles[i];
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    if (h == NULL) set_err(err_buf, err_buf_len, "too many clients");
    return h;
}

void s3rdma_client_free(void *h) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < MAX_HANDLES; i++)
        if (handles[i] != 0 && handles[i] == (uintptr_t)h) handles[i] = 0;
    pthread_mutex_unlock(&mu);
}

int s3rdma_client_ready(void *h) {
    pthread_mutex_lock(&mu);
    int ok = live_handle(h);
    pthread_mutex_unlock(&mu);
    return ok;
}

int s3rdma_client_register(void *h, void *ptr, size_t size) {
    const char *env = getenv("FAKE_S3RDMA_FAIL_REGISTER");
    pthread_mutex_lock(&mu);
    register_calls++;
    int rc = -1;
    if (!live_handle(h) || ptr == NULL || size == 0 || size > MAX_REG_SIZE || fail_register ||
        (env != NULL && strcmp(env, "1") == 0))
        goto out;
    struct reg *r = find_reg((uintptr_t)ptr);
    if (r != NULL) { /* keyed by address: the first size stays */
        r->refs++;
        rc = 0;
        goto out;
    }
    for (int i = 0; i < MAX_REGS; i++) {
        if (regs[i].refs == 0) {
            regs[i] = (struct reg){(uintptr_t)ptr, size, 1, next_rkey++};
            rc = 0;
            break;
        }
    }
out:
    pthread_mutex_unlock(&mu);
    return rc;
}

int s3rdma_client_deregister(void *h, void *ptr) {
    pthread_mutex_lock(&mu);
    deregister_calls++;
    int rc = -1;
    struct reg *r = live_handle(h) ? find_reg((uintptr_t)ptr) : NULL;
    if (r != NULL) {
        r->refs--;
        rc = 0;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

#ifndef FAKE_S3RDMA_NO_GET_TOKEN
int s3rdma_client_get_token(void *h, void *ptr, size_t size, size_t offset, char **token_out) {
    if (token_out == NULL) return -1;
    *token_out = NULL;
    pthread_mutex_lock(&mu);
    token_calls++;
    int rc = -1;
    struct reg *r = live_handle(h) ? find_reg((uintptr_t)ptr) : NULL;
    if (r == NULL || size == 0 || offset > r->size || size > r->size - offset || fail_token) goto out;
    int slot = -1;
    for (int i = 0; i < MAX_TOKENS; i++)
        if (tokens[i] == NULL) { slot = i; break; }
    if (slot < 0) goto out;
    unsigned rail = next_rail++ % RAILS;
    if (rail_down[rail]) rail = (rail + 1) % RAILS;
    char *tok = malloc(82);
    if (tok == NULL) goto out;
    /* addr:size:rkey:lid:dct:gid_present:gid; the GID is fe80::<rail>. */
    snprintf(tok, 82, "%016" PRIx64 ":%08x:%08x:%04x:%06x:1:fe80000000000000000000000000%04x",
             (uint64_t)(r->ptr + offset), (uint32_t)size, r->rkey, 0x0007u, 0x0a0000u + rail, rail);
    tokens[slot] = tok;
    *token_out = tok;
    rc = 0;
out:
    pthread_mutex_unlock(&mu);
    return rc;
}
#endif

void s3rdma_client_free_token(char *token) {
    if (token == NULL) return;
    pthread_mutex_lock(&mu);
    int found = 0;
    for (int i = 0; i < MAX_TOKENS; i++) {
        if (tokens[i] == token) {
            tokens[i] = NULL;
            found = 1;
            break;
        }
    }
    if (found) free(token);
    else bad_frees++; /* not ours, or freed twice: never touch it */
    pthread_mutex_unlock(&mu);
}

int s3rdma_client_memory_type(const void *ptr) {
    (void)ptr;
    return 0; /* S3RDMA_MEM_SYSTEM: a host without libcuda reports every pointer so */
}

#ifndef FAKE_S3RDMA_OLD
int s3rdma_client_nic_count(void *h) {
    pthread_mutex_lock(&mu);
    int n = live_handle(h) ? RAILS : 0;
    pthread_mutex_unlock(&mu);
    return n;
}

int s3rdma_client_healthy_nic_count(void *h) {
    pthread_mutex_lock(&mu);
    int n = 0;
    if (live_handle(h))
        for (int i = 0; i < RAILS; i++) n += !rail_down[i];
    pthread_mutex_unlock(&mu);
    return n;
}

int s3rdma_client_report_token_failure(void *h, const char *token) {
    pthread_mutex_lock(&mu);
    failure_reports++;
    int rc = -1;
    unsigned dct;
    if (live_handle(h) && token != NULL && strlen(token) == 81 && sscanf(token + 40, "%6x", &dct) == 1 &&
        dct >= 0x0a0000u && dct < 0x0a0000u + RAILS) {
        rail_down[dct - 0x0a0000u] = 1;
        int up = 0;
        for (int i = 0; i < RAILS; i++) up += !rail_down[i];
        if (up == 0) memset(rail_down, 0, sizeof rail_down); /* every rail marked: clear the marks */
        rc = 0;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}
#endif

/* Test introspection; not part of libs3rdma. */
int fake_s3rdma_pinned(void) {
    pthread_mutex_lock(&mu);
    int n = 0;
    for (int i = 0; i < MAX_REGS; i++) n += regs[i].refs > 0;
    pthread_mutex_unlock(&mu);
    return n;
}

int fake_s3rdma_refs(void) {
    pthread_mutex_lock(&mu);
    int n = 0;
    for (int i = 0; i < MAX_REGS; i++) n += regs[i].refs;
    pthread_mutex_unlock(&mu);
    return n;
}

int fake_s3rdma_tokens_outstanding(void) {
    pthread_mutex_lock(&mu);
    int n = 0;
    for (int i = 0; i < MAX_TOKENS; i++) n += tokens[i] != NULL;
    pthread_mutex_unlock(&mu);
    return n;
}

long fake_s3rdma_counter(const char *name) {
    pthread_mutex_lock(&mu);
    long v = -1;
    if (strcmp(name, "register") == 0) v = register_calls;
    else if (strcmp(name, "deregister") == 0) v = deregister_calls;
    else if (strcmp(name, "token") == 0) v = token_calls;
    else if (strcmp(name, "bad_free") == 0) v = bad_frees;
    else if (strcmp(name, "failure_report") == 0) v = failure_reports;
    pthread_mutex_unlock(&mu);
    return v;
}

void fake_s3rdma_set_fail_register(int fail) {
    pthread_mutex_lock(&mu);
    fail_register = fail;
    pthread_mutex_unlock(&mu);
}

void fake_s3rdma_set_fail_token(int fail) {
    pthread_mutex_lock(&mu);
    fail_token = fail;
    pthread_mutex_unlock(&mu);
}

int fake_s3rdma_env_seen(void) { return getenv("FAKE_S3RDMA_FAIL_REGISTER") != NULL; }
