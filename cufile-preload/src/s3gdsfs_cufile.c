/*
 * libs3gdsfs_cufile.so - serves NVIDIA cuFile reads and writes of files on
 * s3gdsfs mounts through the S3GDS_IOC_READ and S3GDS_IOC_WRITE ioctls
 * (docs/ioctl.md), and hands every other call to NVIDIA's libcufile
 * untouched. docs/cufile-preload.md is the user's guide.
 *
 * Load it ahead of libcufile (LD_PRELOAD). cuFileHandleRegister looks at the
 * file once: a FUSE file (fstatfs f_type FUSE_SUPER_MAGIC) whose
 * user.s3gdsfs.caps xattr names a daemon that can reach device memory is
 * "ours"; its reads and writes become ioctls naming the CUDA IPC handle of
 * the allocation that holds the buffer (libcuda.so.1, opened at run time).
 * Any other file is registered with the real libcufile, and the handle given
 * back wraps the real one.
 *
 * Builds with gcc and libc alone: cufile_abi.h declares the cuFile and CUDA
 * types used.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "cufile_abi.h"
#include "s3gds.h" /* client/c */

#define EXPORT __attribute__((visibility("default")))

#define FUSE_SUPER_MAGIC 0x65735546

/* The version cuFileGetVersion reports when no real libcufile is found:
 * cuFile 1.13 (CUDA 12.8), whose calls and layouts cufile_abi.h follows.
 * Programs gate the batch (1.6) and stream (1.7) calls on it. */
#define S3GDSFS_CUFILE_VERSION 1130

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- logging ---- */

static int debug_on = -1;

static int debugging(void)
{
	int d = __atomic_load_n(&debug_on, __ATOMIC_RELAXED);
	if (d < 0) {
		const char *e = getenv("S3GDSFS_CUFILE_DEBUG");
		d = e && *e && strcmp(e, "0") != 0;
		__atomic_store_n(&debug_on, d, __ATOMIC_RELAXED);
	}
	return d;
}

__attribute__((format(printf, 1, 2))) static void dbg(const char *fmt, ...)
{
	if (!debugging())
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "s3gdsfs_cufile: %s\n", line);
}

/* once prints line to stderr the first time *flag is seen clear. */
static void once(int *flag, const char *line)
{
	if (__atomic_exchange_n(flag, 1, __ATOMIC_RELAXED) == 0)
		fprintf(stderr, "s3gdsfs_cufile: %s\n", line);
}

static CUfileError_t status(CUfileOpError err)
{
	CUfileError_t e = {err, CUDA_SUCCESS};
	return e;
}

/* ---- NVIDIA's libcufile, found lazily ---- */

enum { REAL_ABSENT = 0, REAL_NEXT = 1, REAL_HANDLE = 2 };
static pthread_once_t real_once = PTHREAD_ONCE_INIT;
static int real_mode;
static void *real_lib;
static char real_why[256];
static int warned_no_real;

/* self_base is the load address of this library. */
static void *self_base(void)
{
	Dl_info info;
	if (dladdr((void *)&self_base, &info) == 0)
		return NULL;
	return info.dli_fbase;
}

static int is_self(void *fn)
{
	Dl_info info;
	return fn && dladdr(fn, &info) != 0 && info.dli_fbase == self_base();
}

static void real_init(void)
{
	/* A program linked against libcufile: the next definition after ours. */
	void *fn = dlsym(RTLD_NEXT, "cuFileRead");
	if (fn && !is_self(fn)) {
		real_mode = REAL_NEXT;
		dbg("real libcufile: the one the program links (RTLD_NEXT)");
		return;
	}
	const char *path = getenv("S3GDSFS_CUFILE_REAL");
	if (!path || !*path)
		path = "libcufile.so.0";
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *err = dlerror();
		snprintf(real_why, sizeof(real_why), "%s", err ? err : path);
		real_mode = REAL_ABSENT;
		dbg("real libcufile: none (%s)", real_why);
		return;
	}
	fn = dlsym(h, "cuFileRead");
	if (!fn || is_self(fn)) {
		snprintf(real_why, sizeof(real_why), "%s is this library, not NVIDIA's (set S3GDSFS_CUFILE_REAL to the real one's path)", path);
		dlclose(h);
		real_mode = REAL_ABSENT;
		dbg("real libcufile: none (%s)", real_why);
		return;
	}
	real_lib = h;
	real_mode = REAL_HANDLE;
	dbg("real libcufile: %s", path);
}

static void *real_sym(const char *name)
{
	pthread_once(&real_once, real_init);
	switch (real_mode) {
	case REAL_NEXT:
		return dlsym(RTLD_NEXT, name);
	case REAL_HANDLE:
		return dlsym(real_lib, name);
	}
	return NULL;
}

static void *real_fn(const char *name, void **cache)
{
	void *p = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
	if (p)
		return p;
	p = real_sym(name);
	if (p)
		__atomic_store_n(cache, p, __ATOMIC_RELEASE);
	return p;
}

/* REAL(cuFileX) is NVIDIA's cuFileX, or NULL. */
#define REAL(name) ({ static void *cache_; (__typeof__(&name))real_fn(#name, &cache_); })

static void warn_no_real(void)
{
	pthread_once(&real_once, real_init);
	char line[512];
	snprintf(line, sizeof(line),
		 "NVIDIA's libcufile is not available (%s): only files on s3gdsfs mounts can be read; "
		 "calls for other files answer CU_FILE_DRIVER_NOT_INITIALIZED",
		 real_why[0] ? real_why : "not loaded");
	once(&warned_no_real, line);
}

/* ---- libcuda.so.1, found lazily ---- */

typedef CUresult (*fn_cuMemGetAddressRange_v2)(CUdeviceptr *, size_t *, CUdeviceptr);
typedef CUresult (*fn_cuIpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
typedef CUresult (*fn_cuPointerGetAttribute)(void *, int, CUdeviceptr);
typedef CUresult (*fn_cuPointerGetAttributes)(unsigned, int *, void **, CUdeviceptr);
typedef CUresult (*fn_cuStreamSynchronize)(CUstream);
typedef CUresult (*fn_cuDeviceGet)(int *, int);
typedef CUresult (*fn_cuDeviceGetPCIBusId)(char *, int, int);

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static struct {
	fn_cuMemGetAddressRange_v2 range;
	fn_cuIpcGetMemHandle ipc;
	fn_cuPointerGetAttribute attr;
	fn_cuPointerGetAttributes attrs;
	fn_cuStreamSynchronize sync;
	fn_cuDeviceGet device_get;             /* with pci_bus_id: this process's devices by PCI address */
	fn_cuDeviceGetPCIBusId pci_bus_id;
	char why[256];
} cuda;
static int warned_no_cuda;

static void cuda_init(void)
{
	const char *path = getenv("S3GDSFS_CUFILE_LIBCUDA");
	if (!path || !*path)
		path = "libcuda.so.1";
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *err = dlerror();
		snprintf(cuda.why, sizeof(cuda.why), "%s", err ? err : path);
		return;
	}
	cuda.range = (fn_cuMemGetAddressRange_v2)dlsym(h, "cuMemGetAddressRange_v2");
	cuda.ipc = (fn_cuIpcGetMemHandle)dlsym(h, "cuIpcGetMemHandle");
	cuda.attr = (fn_cuPointerGetAttribute)dlsym(h, "cuPointerGetAttribute");
	cuda.attrs = (fn_cuPointerGetAttributes)dlsym(h, "cuPointerGetAttributes");
	cuda.sync = (fn_cuStreamSynchronize)dlsym(h, "cuStreamSynchronize");
	cuda.device_get = (fn_cuDeviceGet)dlsym(h, "cuDeviceGet");
	cuda.pci_bus_id = (fn_cuDeviceGetPCIBusId)dlsym(h, "cuDeviceGetPCIBusId");
	if (!cuda.range || !cuda.ipc) {
		snprintf(cuda.why, sizeof(cuda.why), "%s lacks cuMemGetAddressRange_v2 or cuIpcGetMemHandle", path);
		cuda.range = NULL;
		cuda.ipc = NULL;
	}
}

static int cuda_ok(void)
{
	pthread_once(&cuda_once, cuda_init);
	if (cuda.range)
		return 1;
	char line[512];
	snprintf(line, sizeof(line),
		 "libcuda.so.1 is not usable (%s): reads and writes of s3gdsfs files go to NVIDIA's libcufile, "
		 "or fail with CU_FILE_CUDA_DRIVER_ERROR without it",
		 cuda.why);
	once(&warned_no_cuda, line);
	return 0;
}

/* The allocation that holds a device pointer, as the ioctl names it. */
struct alloc {
	CUdeviceptr base;
	size_t size;
	int device;
	unsigned long long id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID; 0 if unknown */
	CUipcMemHandle ipc;
};

static int same_alloc(const struct alloc *a, const struct alloc *b)
{
	return a->base == b->base && a->size == b->size && a->device == b->device &&
	       memcmp(&a->ipc, &b->ipc, sizeof(a->ipc)) == 0;
}

/* resolve asks the driver for the allocation holding ptr and its IPC
 * handle: 0, or the CUfileOpError why not. */
static CUfileOpError resolve(CUdeviceptr ptr, struct alloc *a, CUresult *cu)
{
	if (!cuda_ok())
		return CU_FILE_CUDA_DRIVER_ERROR;
	*cu = cuda.range(&a->base, &a->size, ptr);
	if (*cu != CUDA_SUCCESS)
		return CU_FILE_CUDA_POINTER_INVALID;
	*cu = cuda.ipc(&a->ipc, a->base);
	if (*cu != CUDA_SUCCESS)
		return CU_FILE_CUDA_MEMORY_TYPE_INVALID; /* no legacy IPC handle (a pool, VMM) */
	a->device = 0;
	a->id = 0;
	if (cuda.attrs) {
		int dev = 0;
		unsigned long long id = 0;
		int which[2] = {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_BUFFER_ID};
		void *out[2] = {&dev, &id};
		if (cuda.attrs(2, which, out, ptr) == CUDA_SUCCESS) {
			a->device = dev;
			a->id = id;
		}
	} else if (cuda.attr) {
		int dev = 0;
		if (cuda.attr(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) == CUDA_SUCCESS)
			a->device = dev;
	}
	return CU_FILE_SUCCESS;
}

/* ---- the allocation cache ----
 *
 * The allocations reads went into, sorted by base, so that a buffer read
 * into again costs no cuIpcGetMemHandle (nor cuMemGetAddressRange). Memory
 * freed and allocated again may sit at the same address under a new IPC
 * handle; the driver's buffer ID, unique to an allocation for the life of
 * the process, tells the two apart: locate asks for it (one
 * cuPointerGetAttributes) on every read. A driver that cannot give it leaves
 * the cache to the address range alone, and a stale handle shows as the
 * daemon's EBADF, after which serve_read looks up again and retries once. */

#define CACHE_MAX 4096 /* allocations; a full cache is emptied */

static pthread_rwlock_t cache_mu = PTHREAD_RWLOCK_INITIALIZER;
static struct alloc *cache;
static size_t ncache, capcache;

/* cache_at returns the index of the last entry with base <= ptr, or -1;
 * call with cache_mu held. */
static long cache_at(CUdeviceptr ptr)
{
	long lo = 0, hi = (long)ncache - 1, at = -1;
	while (lo <= hi) {
		long mid = lo + (hi - lo) / 2;
		if (cache[mid].base <= ptr) {
			at = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return at;
}

/* cache_get copies the entry holding ptr (base_only: based at ptr). */
static int cache_get(CUdeviceptr ptr, int base_only, struct alloc *out)
{
	int ok = 0;
	pthread_rwlock_rdlock(&cache_mu);
	long i = cache_at(ptr);
	if (i >= 0 && (base_only ? cache[i].base == ptr : ptr - cache[i].base < cache[i].size)) {
		*out = cache[i];
		ok = 1;
	}
	pthread_rwlock_unlock(&cache_mu);
	return ok;
}

/* cache_put records a, replacing every entry that overlaps it: those
 * allocations are gone. */
static void cache_put(const struct alloc *a)
{
	if (a->size == 0)
		return;
	pthread_rwlock_wrlock(&cache_mu);
	size_t lo = 0;
	while (lo < ncache && cache[lo].base + cache[lo].size <= a->base)
		lo++;
	size_t hi = lo;
	while (hi < ncache && cache[hi].base < a->base + a->size)
		hi++;
	if (hi == lo && ncache >= CACHE_MAX) {
		ncache = lo = hi = 0;
	}
	if (hi == lo && ncache == capcache) {
		size_t cap = capcache ? capcache * 2 : 16;
		struct alloc *n = realloc(cache, cap * sizeof(*n));
		if (!n) {
			pthread_rwlock_unlock(&cache_mu);
			return; /* uncached: the next read asks again */
		}
		cache = n;
		capcache = cap;
	}
	/* [lo, hi) overlap a: one slot stays for a, the rest close up. */
	size_t drop = hi > lo ? hi - lo - 1 : 0;
	if (hi == lo)
		memmove(cache + lo + 1, cache + lo, (ncache - lo) * sizeof(*cache));
	else if (drop)
		memmove(cache + lo + 1, cache + hi, (ncache - hi) * sizeof(*cache));
	ncache = ncache + 1 - (hi - lo);
	cache[lo] = *a;
	pthread_rwlock_unlock(&cache_mu);
}

/* cache_drop forgets the allocation holding ptr. */
static void cache_drop(CUdeviceptr ptr)
{
	pthread_rwlock_wrlock(&cache_mu);
	long i = cache_at(ptr);
	if (i >= 0 && ptr - cache[i].base < cache[i].size) {
		memmove(cache + i, cache + i + 1, (ncache - (size_t)i - 1) * sizeof(*cache));
		ncache--;
	}
	pthread_rwlock_unlock(&cache_mu);
}

/* locate fills a for ptr from the cache, or from the driver (and caches
 * it); *cached says which. 0, or the CUfileOpError why not. */
static CUfileOpError locate(CUdeviceptr ptr, struct alloc *a, int *cached, CUresult *cu)
{
	*cached = 0;
	if (!cuda_ok())
		return CU_FILE_CUDA_DRIVER_ERROR;
	if (cuda.attrs) {
		CUdeviceptr base = 0;
		size_t size = 0;
		unsigned long long id = 0;
		int dev = 0;
		int which[4] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
				CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
		void *out[4] = {&base, &size, &id, &dev};
		if (cuda.attrs(4, which, out, ptr) == CUDA_SUCCESS && id != 0 && size != 0 && ptr - base < size) {
			if (cache_get(base, 1, a) && a->id == id && a->size == size) {
				*cached = 1;
				return CU_FILE_SUCCESS;
			}
			/* New to the cache, or a new allocation where an old one was. */
			a->base = base;
			a->size = size;
			a->device = dev;
			a->id = id;
			*cu = cuda.ipc(&a->ipc, base);
			if (*cu != CUDA_SUCCESS)
				return CU_FILE_CUDA_MEMORY_TYPE_INVALID; /* no legacy IPC handle (a pool, VMM) */
			cache_put(a);
			return CU_FILE_SUCCESS;
		}
	}
	if (cache_get(ptr, 0, a)) {
		*cached = 1;
		return CU_FILE_SUCCESS;
	}
	CUfileOpError err = resolve(ptr, a, cu);
	if (err == CU_FILE_SUCCESS)
		cache_put(a);
	return err;
}

/* ---- handles ---- */

/* The order of a handle's writes (wait_turn). */
struct write_order {
	pthread_mutex_t mu;
	pthread_cond_t moved; /* broadcast when a write took bytes */
	unsigned long long done; /* writes that took bytes */
	long long end;           /* where the latest of them ended; -1 before any */
};

/* The daemon's devices by PCI address (caps' pci_bus_id): a process whose
 * CUDA_VISIBLE_DEVICES, or container, shows it some of the GPUs numbers
 * them from 0, the daemon numbers all of them, so requests name the
 * daemon's ordinal of the process's device (daemon_device). */
#define MAX_DEVICES 64
struct pci_address {
	unsigned domain, bus, device;
};
struct device_map {
	int n; /* devices with an address; 0: ordinals are taken as they are */
	int ordinal[MAX_DEVICES];
	struct pci_address pci[MAX_DEVICES];
	int local[MAX_DEVICES]; /* this process's ordinal -> the daemon's; -1 not looked up, -2 none */
};

struct handle {
	struct handle *next;
	int ours;       /* on an s3gdsfs mount: reads and writes go through the ioctls */
	int fd;
	uint32_t flags; /* S3GDS_F_HOST_BUFFER for a host stand-in daemon */
	struct device_map devs; /* ours only */
	CUfileDescr_t descr;
	CUfileHandle_t real; /* NVIDIA's handle, when registered there */
	int real_registered;
	struct write_order order; /* ours only */
};

static struct handle *handles;

/* find returns the registered handle fh, or NULL; call with mu held. */
static struct handle *find(CUfileHandle_t fh)
{
	for (struct handle *h = handles; h; h = h->next)
		if ((CUfileHandle_t)h == fh)
			return h;
	return NULL;
}

static void order_init(struct write_order *o)
{
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* the waits are not moved by the wall clock */
	pthread_cond_init(&o->moved, &attr);
	pthread_condattr_destroy(&attr);
	pthread_mutex_init(&o->mu, NULL);
	o->done = 0;
	o->end = -1;
}

/* json_string finds "key": "value" in a flat JSON object and copies value. */
static int json_string(const char *json, const char *key, char *out, size_t outlen)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "\"%s\"", key);
	const char *p = strstr(json, pat);
	if (!p)
		return 0;
	p += strlen(pat);
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	if (*p++ != ':')
		return 0;
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	if (*p == '"') {
		p++;
		size_t n = 0;
		while (p[n] && p[n] != '"')
			n++;
		if (p[n] != '"' || n >= outlen)
			return 0;
		memcpy(out, p, n);
		out[n] = 0;
		return 1;
	}
	size_t n = 0;
	while (p[n] && p[n] != ',' && p[n] != '}' && n + 1 < outlen) {
		out[n] = p[n];
		n++;
	}
	out[n] = 0;
	return n > 0;
}

/* on_mount says whether fd is a file of an s3gdsfs mount whose daemon can
 * write into device memory, and which flags its reads need. */
static int parse_pci(const char *text, struct pci_address *out)
{
	return sscanf(text, "%x:%x:%x", &out->domain, &out->bus, &out->device) == 3;
}

/* parse_devices fills m from caps' "devices": each object's ordinal and
 * pci_bus_id (absent for the host stand-in). */
static void parse_devices(const char *caps, struct device_map *m)
{
	memset(m, 0, sizeof(*m));
	for (int i = 0; i < MAX_DEVICES; i++)
		m->local[i] = -1;
	const char *p = strstr(caps, "\"devices\"");
	const char *end = p ? strchr(p, ']') : NULL;
	while (p && end && m->n < MAX_DEVICES) {
		const char *open = strchr(p, '{');
		if (!open || open > end)
			break;
		const char *close = strchr(open, '}');
		if (!close || close > end)
			break;
		char obj[512], v[64];
		size_t len = (size_t)(close - open + 1);
		if (len < sizeof(obj)) {
			memcpy(obj, open, len);
			obj[len] = 0;
			struct pci_address a;
			if (json_string(obj, "pci_bus_id", v, sizeof(v)) && parse_pci(v, &a) &&
			    json_string(obj, "ordinal", v, sizeof(v))) {
				m->ordinal[m->n] = (int)strtol(v, NULL, 10);
				m->pci[m->n] = a;
				m->n++;
			}
		}
		p = close + 1;
	}
}

/* daemon_device is the daemon's ordinal of this process's device local
 * (its PCI address in the daemon's list), local itself where neither side
 * names addresses, or -1 (errno ENODEV) where the daemon does not see it. */
static int daemon_device(struct handle *h, int local)
{
	struct device_map *m = &h->devs;
	if (m->n == 0 || local < 0 || local >= MAX_DEVICES)
		return local;
	int got = __atomic_load_n(&m->local[local], __ATOMIC_ACQUIRE);
	if (got == -1) {
		got = local;
		int dev;
		char bus[32];
		struct pci_address a;
		if (cuda.device_get && cuda.pci_bus_id && cuda.device_get(&dev, local) == CUDA_SUCCESS &&
		    cuda.pci_bus_id(bus, sizeof(bus), dev) == CUDA_SUCCESS && parse_pci(bus, &a)) {
			got = -2;
			for (int i = 0; i < m->n; i++)
				if (m->pci[i].domain == a.domain && m->pci[i].bus == a.bus && m->pci[i].device == a.device)
					got = m->ordinal[i];
			if (got == -2)
				dbg("device %d (PCI %s) is not one the daemon sees", local, bus);
		}
		__atomic_store_n(&m->local[local], got, __ATOMIC_RELEASE);
	}
	if (got == -2) {
		errno = ENODEV;
		return -1;
	}
	return got;
}

static int on_mount(int fd, uint32_t *flags, struct device_map *devs, char *why, size_t whylen)
{
	const char *off = getenv("S3GDSFS_CUFILE_DISABLE");
	if (off && *off && strcmp(off, "0") != 0) {
		snprintf(why, whylen, "S3GDSFS_CUFILE_DISABLE is set");
		return 0;
	}
	struct statfs st;
	if (fstatfs(fd, &st) != 0) {
		snprintf(why, whylen, "fstatfs: %s", strerror(errno));
		return 0;
	}
	if ((unsigned long)st.f_type != FUSE_SUPER_MAGIC) {
		snprintf(why, whylen, "not FUSE (f_type 0x%lx)", (unsigned long)st.f_type);
		return 0;
	}
	char caps[4096];
	ssize_t n = fgetxattr(fd, S3GDS_XATTR_CAPS, caps, sizeof(caps) - 1);
	if (n <= 0) {
		snprintf(why, whylen, "FUSE without %s (%s)", S3GDS_XATTR_CAPS, n < 0 ? strerror(errno) : "empty");
		return 0;
	}
	caps[n] = 0;
	char v[64];
	if (!json_string(caps, "abi_version", v, sizeof(v)) || strtol(v, NULL, 10) != S3GDS_ABI_VERSION) {
		snprintf(why, whylen, "s3gdsfs of another ioctl ABI (abi_version %s)", v);
		return 0;
	}
	if (!json_string(caps, "cuda_backend", v, sizeof(v))) {
		snprintf(why, whylen, "s3gdsfs caps without cuda_backend");
		return 0;
	}
	if (strcmp(v, "cuda") == 0) {
		*flags = 0;
		parse_devices(caps, devs);
		return 1;
	}
	if (strcmp(v, "host-standin") == 0) {
		*flags = S3GDS_F_HOST_BUFFER;
		parse_devices(caps, devs);
		return 1;
	}
	snprintf(why, whylen, "s3gdsfs daemon without CUDA (cuda_backend %s)", v);
	return 0;
}

/* real_handle registers h with NVIDIA's libcufile if it is not yet, and
 * returns its handle there; for reads of ours that cannot be served. */
static pthread_mutex_t real_mu = PTHREAD_MUTEX_INITIALIZER; /* serialises real_handle; mu is never held into libcufile */

static CUfileOpError real_handle(struct handle *h, CUfileHandle_t *out)
{
	CUfileOpError err = CU_FILE_SUCCESS;
	__typeof__(&cuFileHandleRegister) reg = REAL(cuFileHandleRegister);
	pthread_mutex_lock(&real_mu);
	if (!h->real_registered) {
		if (!reg) {
			err = CU_FILE_DRIVER_NOT_INITIALIZED;
		} else {
			CUfileError_t e = reg(&h->real, &h->descr);
			if (e.err == CU_FILE_SUCCESS)
				h->real_registered = 1;
			else
				err = e.err;
		}
	}
	*out = h->real;
	pthread_mutex_unlock(&real_mu);
	return err;
}

EXPORT CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr)
{
	if (!fh || !descr)
		return status(CU_FILE_INVALID_VALUE);
	struct handle *h = calloc(1, sizeof(*h));
	if (!h)
		return status(CU_FILE_INTERNAL_ERROR);
	h->descr = *descr;
	h->fd = descr->type == CU_FILE_HANDLE_TYPE_OPAQUE_FD ? descr->handle.fd : -1;
	char why[256] = "not an fd handle";
	if (descr->type == CU_FILE_HANDLE_TYPE_OPAQUE_FD && !descr->fs_ops &&
	    on_mount(h->fd, &h->flags, &h->devs, why, sizeof(why)))
		h->ours = 1;
	if (h->ours) {
		pthread_mutex_lock(&mu);
		for (struct handle *o = handles; o; o = o->next) {
			if (o->ours && o->fd == h->fd) {
				pthread_mutex_unlock(&mu);
				free(h);
				dbg("register fd %d: already registered", descr->handle.fd);
				return status(CU_FILE_HANDLE_ALREADY_REGISTERED);
			}
		}
		order_init(&h->order);
		h->next = handles;
		handles = h;
		pthread_mutex_unlock(&mu);
		*fh = h;
		dbg("register fd %d: s3gdsfs, served by ioctl%s", h->fd,
		    h->flags & S3GDS_F_HOST_BUFFER ? " (host stand-in daemon)" : "");
		return status(CU_FILE_SUCCESS);
	}
	__typeof__(&cuFileHandleRegister) reg = REAL(cuFileHandleRegister);
	if (!reg) {
		warn_no_real();
		dbg("register fd %d: %s; no real libcufile: CU_FILE_DRIVER_NOT_INITIALIZED", h->fd, why);
		free(h);
		return status(CU_FILE_DRIVER_NOT_INITIALIZED);
	}
	CUfileError_t e = reg(&h->real, descr);
	if (e.err != CU_FILE_SUCCESS) {
		dbg("register fd %d: %s; real libcufile answered %d", h->fd, why, (int)e.err);
		free(h);
		return e;
	}
	h->real_registered = 1;
	pthread_mutex_lock(&mu);
	h->next = handles;
	handles = h;
	pthread_mutex_unlock(&mu);
	*fh = h;
	dbg("register fd %d: %s; passed to the real libcufile", h->fd, why);
	return e;
}

EXPORT void cuFileHandleDeregister(CUfileHandle_t fh)
{
	pthread_mutex_lock(&mu);
	struct handle **pp = &handles;
	while (*pp && (CUfileHandle_t)*pp != fh)
		pp = &(*pp)->next;
	struct handle *h = *pp;
	if (h)
		*pp = h->next;
	pthread_mutex_unlock(&mu);
	if (!h) {
		/* Not one of ours: perhaps NVIDIA's own, from a call that did not
		 * come through here. */
		__typeof__(&cuFileHandleDeregister) dereg = REAL(cuFileHandleDeregister);
		dbg("deregister %p: not registered here; %s", fh, dereg ? "passed on" : "ignored");
		if (dereg)
			dereg(fh);
		return;
	}
	if (h->real_registered) {
		__typeof__(&cuFileHandleDeregister) dereg = REAL(cuFileHandleDeregister);
		if (dereg)
			dereg(h->real);
	}
	dbg("deregister fd %d", h->fd);
	if (h->ours) {
		pthread_mutex_destroy(&h->order.mu);
		pthread_cond_destroy(&h->order.moved);
	}
	free(h);
}

/* ---- buffers ---- */

struct buf {
	struct buf *next;
	CUdeviceptr base;
	size_t len;
	int have_alloc; /* alloc is the allocation holding [base, base+len) */
	struct alloc alloc;
	int real_registered;
};

static struct buf *bufs;

EXPORT CUfileError_t cuFileBufRegister(const void *ptr, size_t len, int flags)
{
	if (!ptr || len == 0)
		return status(CU_FILE_INVALID_VALUE);
	CUdeviceptr base = (CUdeviceptr)(uintptr_t)ptr;
	pthread_mutex_lock(&mu);
	for (struct buf *b = bufs; b; b = b->next) {
		if (b->base == base) {
			pthread_mutex_unlock(&mu);
			return status(CU_FILE_MEMORY_ALREADY_REGISTERED);
		}
	}
	pthread_mutex_unlock(&mu);

	struct buf *b = calloc(1, sizeof(*b));
	if (!b)
		return status(CU_FILE_INTERNAL_ERROR);
	b->base = base;
	b->len = len;
	CUresult cu = CUDA_SUCCESS;
	CUfileOpError rerr = resolve(base, &b->alloc, &cu);
	if (rerr == CU_FILE_SUCCESS && base + len <= b->alloc.base + b->alloc.size) {
		b->have_alloc = 1;
		cache_put(&b->alloc);
	}
	CUfileError_t e = status(CU_FILE_SUCCESS);
	__typeof__(&cuFileBufRegister) reg = REAL(cuFileBufRegister);
	if (reg) {
		e = reg(ptr, len, flags);
		if (e.err == CU_FILE_SUCCESS)
			b->real_registered = 1;
	} else if (!b->have_alloc) {
		e.err = rerr != CU_FILE_SUCCESS ? rerr : CU_FILE_CUDA_POINTER_RANGE_ERROR;
		e.cu_err = cu;
	}
	if (e.err != CU_FILE_SUCCESS && !b->have_alloc) {
		dbg("buffer %p+%zu: not registered (%d)", ptr, len, (int)e.err);
		free(b);
		return e;
	}
	pthread_mutex_lock(&mu);
	b->next = bufs;
	bufs = b;
	pthread_mutex_unlock(&mu);
	dbg("buffer %p+%zu: registered%s%s", ptr, len,
	    b->have_alloc ? ", IPC handle cached" : "",
	    b->real_registered ? ", also with the real libcufile" : "");
	return status(CU_FILE_SUCCESS);
}

EXPORT CUfileError_t cuFileBufDeregister(const void *ptr)
{
	CUdeviceptr base = (CUdeviceptr)(uintptr_t)ptr;
	pthread_mutex_lock(&mu);
	struct buf **pp = &bufs;
	while (*pp && (*pp)->base != base)
		pp = &(*pp)->next;
	struct buf *b = *pp;
	if (b)
		*pp = b->next;
	pthread_mutex_unlock(&mu);
	if (!b) {
		__typeof__(&cuFileBufDeregister) dereg = REAL(cuFileBufDeregister);
		return dereg ? dereg(ptr) : status(CU_FILE_MEMORY_NOT_REGISTERED);
	}
	/* Deregistration often comes just before the memory is freed. */
	cache_drop(base);
	CUfileError_t e = status(CU_FILE_SUCCESS);
	if (b->real_registered) {
		__typeof__(&cuFileBufDeregister) dereg = REAL(cuFileBufDeregister);
		if (dereg)
			e = dereg(ptr);
	}
	dbg("buffer %p: deregistered", ptr);
	free(b);
	return e;
}

/* ---- reads and writes ---- */

enum op { OP_READ, OP_WRITE };
static const char *const op_name[] = {"read", "write"};

#define FALLBACK 1 /* serve could not serve: hand the call to the real libcufile */

/* io_ioctl issues one S3GDS_IOC_READ (OP_READ) or S3GDS_IOC_WRITE of
 * [off, off+size) of h's file, to or from ptr inside allocation a: 0, or -1
 * with errno. */
static int io_ioctl(struct handle *h, enum op op, const struct alloc *a, CUdeviceptr ptr, size_t size, off_t off,
		    struct s3gds_read *req)
{
	s3gds_read_init(req);
	req->flags = h->flags;
	int device = daemon_device(h, a->device);
	if (device < 0)
		return -1;
	req->device = device;
	req->offset = (uint64_t)off;
	req->length = size;
	req->dst_offset = ptr - a->base;
	memcpy(req->ipc_handle, &a->ipc, sizeof(req->ipc_handle));
	unsigned long cmd = op == OP_WRITE ? S3GDS_IOC_WRITE : S3GDS_IOC_READ;
	int rc;
	do
		rc = ioctl(h->fd, cmd, req);
	while (rc != 0 && errno == EINTR);
	return rc;
}

/* opened_without says whether h's descriptor lacks the access op needs: the
 * daemon's EBADF is then about the file, not the buffer's handle. */
static int opened_without(struct handle *h, enum op op)
{
	int fl = fcntl(h->fd, F_GETFL);
	if (fl < 0)
		return 1;
	return op == OP_WRITE ? (fl & O_ACCMODE) == O_RDONLY : (fl & O_ACCMODE) == O_WRONLY;
}

/* ---- the order of writes ----
 *
 * The daemon takes a file's bytes in order only: a write must start where
 * the bytes written so far end, or it is EINVAL (docs/ioctl.md). A program
 * that splits one write over threads (kvikio's pool with KVIKIO_NTHREADS
 * above 1) issues the pieces at once, in no set order. A piece refused as
 * out of order waits for the handle's other writes, and is issued again
 * when one ends where it starts. It fails with EINVAL at once when it
 * starts before where the handle's writes have ended (those bytes are
 * written: never again), and otherwise when no write of the handle took
 * bytes for WRITE_TURN_MS, after one last try (write(2) may have filled the
 * gap). A program that writes out of order alone pays that wait once per
 * refused write. */

#define WRITE_TURN_MS 2000

enum { TURN_RETRY, TURN_LAST, TURN_NEVER };

static unsigned long long order_seen(struct write_order *o)
{
	pthread_mutex_lock(&o->mu);
	unsigned long long n = o->done;
	pthread_mutex_unlock(&o->mu);
	return n;
}

static void order_moved(struct write_order *o, off_t off, uint64_t bytes)
{
	if (bytes == 0)
		return;
	pthread_mutex_lock(&o->mu);
	o->done++;
	if ((long long)off + (long long)bytes > o->end)
		o->end = (long long)off + (long long)bytes;
	pthread_cond_broadcast(&o->moved);
	pthread_mutex_unlock(&o->mu);
}

static void turn_deadline(struct timespec *t)
{
	clock_gettime(CLOCK_MONOTONIC, t);
	t->tv_sec += WRITE_TURN_MS / 1000;
	t->tv_nsec += (long)(WRITE_TURN_MS % 1000) * 1000000L;
	if (t->tv_nsec >= 1000000000L) {
		t->tv_sec++;
		t->tv_nsec -= 1000000000L;
	}
}

/* wait_turn waits, after the write at off was refused as out of order, for
 * another write of the handle to end at off; seen is the handle's count of
 * writes done when the refused one was issued. A write behind the end
 * waits for nothing. */
static int wait_turn(struct write_order *o, off_t off, unsigned long long seen)
{
	struct timespec until;
	turn_deadline(&until);
	int turn = TURN_LAST, timed_out = 0;
	pthread_mutex_lock(&o->mu);
	for (;;) {
		if (o->end > (long long)off) {
			turn = TURN_NEVER; /* every byte up to end is written */
			break;
		}
		if (o->done != seen) {
			if (o->end == (long long)off) {
				turn = TURN_RETRY;
				break;
			}
			seen = o->done;
			turn_deadline(&until); /* writes are moving: wait on */
		}
		if (timed_out)
			break;
		timed_out = pthread_cond_timedwait(&o->moved, &o->mu, &until) == ETIMEDOUT;
	}
	pthread_mutex_unlock(&o->mu);
	return turn;
}

/* Where serve found the buffer's allocation. */
enum { FROM_DRIVER, FROM_CACHE, FROM_REGISTERED };
static const char *const from_name[] = {"", " (cached allocation)", " (registered buffer)"};

/* serve reads (OP_READ) [off, off+size) of h's file into ptr, or writes
 * size bytes from ptr at off, through the ioctl: one ioctl, however large
 * (a write refused as out of order may be issued again: wait_turn). It
 * returns 0 with *ret the cuFileRead or cuFileWrite value, or FALLBACK with
 * *ret the value to return should no real libcufile take the call. */
static int serve(struct handle *h, enum op op, CUdeviceptr ptr, size_t size, off_t off, ssize_t *ret)
{
	const char *name = op_name[op];
	if (off < 0 || size > (size_t)SSIZE_MAX) {
		errno = EINVAL;
		*ret = -1;
		return 0;
	}
	if (size == 0) {
		*ret = 0;
		return 0;
	}
	struct alloc a;
	int from = FROM_DRIVER;
	struct buf *reg = NULL;
	pthread_mutex_lock(&mu);
	for (struct buf *b = bufs; b; b = b->next) {
		if (b->have_alloc && ptr >= b->base && ptr - b->base < b->len) {
			a = b->alloc;
			reg = b;
			from = FROM_REGISTERED;
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	if (!reg) {
		CUresult cu = CUDA_SUCCESS;
		int cached = 0;
		CUfileOpError err = locate(ptr, &a, &cached, &cu);
		if (err != CU_FILE_SUCCESS) {
			dbg("%s fd %d: buffer 0x%llx: %d (CUDA %d)", name, h->fd, (unsigned long long)ptr, (int)err, cu);
			*ret = -(ssize_t)err;
			return FALLBACK;
		}
		if (cached)
			from = FROM_CACHE;
	}
	struct s3gds_read req;
	int looked_again = 0, last_turn = 0;
	for (;;) {
		if (ptr + size > a.base + a.size || ptr + size < ptr) {
			dbg("%s fd %d: [0x%llx, +%zu) runs past its allocation [0x%llx, +%zu)", name, h->fd,
			    (unsigned long long)ptr, size, (unsigned long long)a.base, a.size);
			*ret = -(ssize_t)CU_FILE_CUDA_POINTER_RANGE_ERROR;
			return 0;
		}
		unsigned long long seen = op == OP_WRITE ? order_seen(&h->order) : 0;
		if (io_ioctl(h, op, &a, ptr, size, off, &req) == 0)
			break;
		int e = errno;
		dbg("%s fd %d: [%lld, +%zu): ioctl: %s", name, h->fd, (long long)off, size, strerror(e));
		if (op == OP_WRITE && e == EINVAL && !last_turn) {
			int turn = wait_turn(&h->order, off, seen);
			if (turn != TURN_NEVER) {
				last_turn = turn == TURN_LAST;
				dbg("write fd %d: [%lld, +%zu) %s", h->fd, (long long)off, size,
				    last_turn ? "out of order, no write of the handle moved: trying once more"
					      : "waited for the writes before it: issuing it again");
				continue;
			}
			dbg("write fd %d: [%lld, +%zu) lies behind the bytes written", h->fd, (long long)off, size);
		}
		/* EBADF: the daemon cannot open the handle, or the file is not
		 * open for this. A handle that came from a cache may be stale
		 * (the memory freed and allocated again at this address): ask
		 * the driver once more, and retry if it names another
		 * allocation. */
		struct alloc fresh;
		CUresult cu = CUDA_SUCCESS;
		int file_refused = e == EBADF && opened_without(h, op);
		if (e != EBADF || file_refused || looked_again || from == FROM_DRIVER ||
		    resolve(ptr, &fresh, &cu) != CU_FILE_SUCCESS || same_alloc(&fresh, &a)) {
			if (e == EBADF && !file_refused && from != FROM_DRIVER)
				cache_drop(ptr);
			errno = e;
			*ret = -1;
			return 0;
		}
		looked_again = 1;
		dbg("%s fd %d: the handle of 0x%llx was stale; looked up again, retrying", name, h->fd,
		    (unsigned long long)ptr);
		if (from == FROM_REGISTERED) {
			pthread_mutex_lock(&mu);
			for (struct buf *b = bufs; b; b = b->next)
				if (b == reg)
					b->alloc = fresh;
			pthread_mutex_unlock(&mu);
		}
		cache_put(&fresh);
		a = fresh;
	}
	if (op == OP_WRITE)
		order_moved(&h->order, off, req.bytes);
	dbg("%s fd %d: [%lld, +%zu) -> %llu bytes over %s%s", name, h->fd, (long long)off, size,
	    (unsigned long long)req.bytes, s3gds_transport_name(req.transport), from_name[from]);
	*ret = (ssize_t)req.bytes;
	return 0;
}

/* lookup copies the registered handle fh, or returns 0. */
static struct handle *lookup(CUfileHandle_t fh)
{
	pthread_mutex_lock(&mu);
	struct handle *h = find(fh);
	pthread_mutex_unlock(&mu);
	return h;
}

/* ours_io serves a synchronous read or write of a file of ours through the
 * ioctls: 1 with *ret its answer, or 0 with *rh NVIDIA's handle for the
 * call to go to (serve fell back and have_real: the real libcufile is
 * loaded). */
static int ours_io(struct handle *h, enum op op, CUdeviceptr ptr, size_t size, off_t off, int have_real, ssize_t *ret,
		   CUfileHandle_t *rh)
{
	if (serve(h, op, ptr, size, off, ret) != FALLBACK)
		return 1;
	if (!have_real || real_handle(h, rh) != CU_FILE_SUCCESS) {
		if (!have_real)
			warn_no_real();
		return 1;
	}
	dbg("%s fd %d: passed to the real libcufile", op_name[op], h->fd);
	return 0;
}

EXPORT ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset)
{
	struct handle *h = lookup(fh);
	__typeof__(&cuFileRead) real = REAL(cuFileRead);
	if (!h) {
		/* Not registered here: NVIDIA's libcufile judges it. */
		dbg("read %p: not registered here; %s", fh, real ? "passed on" : "CU_FILE_HANDLE_NOT_REGISTERED");
		return real ? real(fh, bufPtr_base, size, file_offset, bufPtr_offset) : -(ssize_t)CU_FILE_HANDLE_NOT_REGISTERED;
	}
	if (h->ours) {
		ssize_t ret;
		CUfileHandle_t rh;
		CUdeviceptr dst = (CUdeviceptr)(uintptr_t)bufPtr_base + (CUdeviceptr)bufPtr_offset;
		if (ours_io(h, OP_READ, dst, size, file_offset, real != NULL, &ret, &rh))
			return ret;
		return real(rh, bufPtr_base, size, file_offset, bufPtr_offset);
	}
	if (!real) {
		warn_no_real();
		return -(ssize_t)CU_FILE_DRIVER_NOT_INITIALIZED;
	}
	return real(h->real, bufPtr_base, size, file_offset, bufPtr_offset);
}

EXPORT ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset)
{
	struct handle *h = lookup(fh);
	__typeof__(&cuFileWrite) real = REAL(cuFileWrite);
	if (!h) {
		dbg("write %p: not registered here; %s", fh, real ? "passed on" : "CU_FILE_HANDLE_NOT_REGISTERED");
		return real ? real(fh, bufPtr_base, size, file_offset, bufPtr_offset) : -(ssize_t)CU_FILE_HANDLE_NOT_REGISTERED;
	}
	if (h->ours) {
		ssize_t ret;
		CUfileHandle_t rh;
		CUdeviceptr src = (CUdeviceptr)(uintptr_t)bufPtr_base + (CUdeviceptr)bufPtr_offset;
		if (ours_io(h, OP_WRITE, src, size, file_offset, real != NULL, &ret, &rh))
			return ret;
		return real(rh, bufPtr_base, size, file_offset, bufPtr_offset);
	}
	if (!real) {
		warn_no_real();
		return -(ssize_t)CU_FILE_DRIVER_NOT_INITIALIZED;
	}
	return real(h->real, bufPtr_base, size, file_offset, bufPtr_offset);
}

/* Stream-ordered reads and writes of ours run at once, after the stream
 * drains: a read's bytes are in place, and a write has taken the buffer's,
 * when the call returns, so later work on the stream may use the buffer.
 * serve_async answers the call of h in *e, or returns FALLBACK with *rh
 * for the real libcufile (registered there) to take it. */
static int serve_async(struct handle *h, enum op op, void *base, size_t *size_p, off_t *file_offset_p,
		       off_t *buf_offset_p, ssize_t *done_p, CUstream stream, int have_real, CUfileHandle_t *rh,
		       CUfileError_t *e)
{
	*e = status(CU_FILE_SUCCESS);
	if (cuda_ok() && cuda.sync) {
		CUresult cu = cuda.sync(stream);
		if (cu != CUDA_SUCCESS) {
			e->err = CU_FILE_CUDA_DRIVER_ERROR;
			e->cu_err = cu;
			return 0;
		}
		ssize_t ret;
		CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)base + (CUdeviceptr)*buf_offset_p;
		if (serve(h, op, ptr, *size_p, *file_offset_p, &ret) != FALLBACK) {
			*done_p = ret;
			return 0;
		}
	}
	CUfileOpError err = have_real ? real_handle(h, rh) : CU_FILE_DRIVER_NOT_INITIALIZED;
	if (err != CU_FILE_SUCCESS) {
		if (!have_real)
			warn_no_real();
		e->err = cuda.sync ? err : CU_FILE_CUDA_DRIVER_ERROR;
		return 0;
	}
	return FALLBACK;
}

EXPORT CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
				     off_t *bufPtr_offset_p, ssize_t *bytes_read_p, CUstream stream)
{
	struct handle *h = lookup(fh);
	__typeof__(&cuFileReadAsync) real = REAL(cuFileReadAsync);
	if (!h) {
		if (!real)
			return status(CU_FILE_HANDLE_NOT_REGISTERED);
		return real(fh, bufPtr_base, size_p, file_offset_p, bufPtr_offset_p, bytes_read_p, stream);
	}
	if (!size_p || !file_offset_p || !bufPtr_offset_p || !bytes_read_p)
		return status(CU_FILE_INVALID_VALUE);
	CUfileHandle_t rh = h->real;
	if (h->ours) {
		CUfileError_t e;
		if (serve_async(h, OP_READ, bufPtr_base, size_p, file_offset_p, bufPtr_offset_p, bytes_read_p, stream,
				real != NULL, &rh, &e) != FALLBACK)
			return e;
	} else if (!real) {
		warn_no_real();
		return status(CU_FILE_DRIVER_NOT_INITIALIZED);
	}
	return real(rh, bufPtr_base, size_p, file_offset_p, bufPtr_offset_p, bytes_read_p, stream);
}

EXPORT CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
				      off_t *bufPtr_offset_p, ssize_t *bytes_written_p, CUstream stream)
{
	struct handle *h = lookup(fh);
	__typeof__(&cuFileWriteAsync) real = REAL(cuFileWriteAsync);
	if (!h) {
		if (!real)
			return status(CU_FILE_HANDLE_NOT_REGISTERED);
		return real(fh, bufPtr_base, size_p, file_offset_p, bufPtr_offset_p, bytes_written_p, stream);
	}
	if (!size_p || !file_offset_p || !bufPtr_offset_p || !bytes_written_p)
		return status(CU_FILE_INVALID_VALUE);
	CUfileHandle_t rh = h->real;
	if (h->ours) {
		CUfileError_t e;
		if (serve_async(h, OP_WRITE, bufPtr_base, size_p, file_offset_p, bufPtr_offset_p, bytes_written_p,
				stream, real != NULL, &rh, &e) != FALLBACK)
			return e;
	} else if (!real) {
		warn_no_real();
		return status(CU_FILE_DRIVER_NOT_INITIALIZED);
	}
	return real(rh, bufPtr_base, size_p, file_offset_p, bufPtr_offset_p, bytes_written_p, stream);
}

/* ---- batches ---- */

/* A batch of ours: reads and writes of s3gdsfs files complete at submission
 * and wait in done for cuFileBatchIOGetStatus; the rest go to a real batch. */
struct batch {
	struct batch *next;
	unsigned nr;
	CUfileBatchHandle_t real;
	int real_ok;
	CUfileIOEvents_t *done;
	unsigned ndone;
};

static struct batch *batches;

static struct batch *find_batch(CUfileBatchHandle_t bh)
{
	for (struct batch *b = batches; b; b = b->next)
		if ((CUfileBatchHandle_t)b == bh)
			return b;
	return NULL;
}

EXPORT CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr)
{
	if (!batch_idp || nr == 0)
		return status(CU_FILE_INVALID_VALUE);
	struct batch *b = calloc(1, sizeof(*b));
	if (!b || !(b->done = calloc(nr, sizeof(*b->done)))) {
		free(b);
		return status(CU_FILE_INTERNAL_ERROR);
	}
	b->nr = nr;
	__typeof__(&cuFileBatchIOSetUp) setup = REAL(cuFileBatchIOSetUp);
	if (setup && setup(&b->real, nr).err == CU_FILE_SUCCESS)
		b->real_ok = 1;
	pthread_mutex_lock(&mu);
	b->next = batches;
	batches = b;
	pthread_mutex_unlock(&mu);
	*batch_idp = b;
	dbg("batch %p: set up for %u%s", (void *)b, nr, b->real_ok ? "" : " (no real batch: s3gdsfs files only)");
	return status(CU_FILE_SUCCESS);
}

/* batch_done records the result of an entry served here for
 * cuFileBatchIOGetStatus: CU_FILE_SUCCESS, or CU_FILE_BATCH_FULL. */
static CUfileOpError batch_done(struct batch *b, void *cookie, ssize_t ret)
{
	CUfileOpError err = CU_FILE_SUCCESS;
	pthread_mutex_lock(&mu);
	if (b->ndone < b->nr) {
		CUfileIOEvents_t *ev = &b->done[b->ndone++];
		ev->cookie = cookie;
		ev->status = ret >= 0 ? CUFILE_COMPLETE : CUFILE_FAILED;
		ev->ret = (size_t)ret;
	} else {
		err = CU_FILE_BATCH_FULL;
	}
	pthread_mutex_unlock(&mu);
	return err;
}

/* A write of a batch served here, in the order they are served. */
struct batch_write {
	struct handle *h;
	unsigned i; /* its entry */
};

/* by_file_order: by handle, then file offset, then entry (of params). */
static int by_file_order(const void *x, const void *y, void *params)
{
	const struct batch_write *a = x, *b = y;
	const CUfileIOParams_t *io = params;
	if (a->h != b->h)
		return (uintptr_t)a->h < (uintptr_t)b->h ? -1 : 1;
	off_t oa = io[a->i].u.batch.file_offset, ob = io[b->i].u.batch.file_offset;
	if (oa != ob)
		return oa < ob ? -1 : 1;
	return a->i < b->i ? -1 : a->i > b->i;
}

EXPORT CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr, CUfileIOParams_t *iocbp, unsigned flags)
{
	pthread_mutex_lock(&mu);
	struct batch *b = find_batch(batch_idp);
	pthread_mutex_unlock(&mu);
	if (!b) {
		__typeof__(&cuFileBatchIOSubmit) submit = REAL(cuFileBatchIOSubmit);
		return submit ? submit(batch_idp, nr, iocbp, flags) : status(CU_FILE_INVALID_VALUE);
	}
	if (!iocbp || nr == 0 || nr > b->nr)
		return status(CU_FILE_INVALID_VALUE);
	CUfileIOParams_t *pass = calloc(nr, sizeof(*pass));
	struct batch_write *writes = calloc(nr, sizeof(*writes));
	if (!pass || !writes) {
		free(pass);
		free(writes);
		return status(CU_FILE_INTERNAL_ERROR);
	}
	unsigned npass = 0, nwrites = 0;
	CUfileError_t e = status(CU_FILE_SUCCESS);
	for (unsigned i = 0; i < nr && e.err == CU_FILE_SUCCESS; i++) {
		struct handle *h = lookup(iocbp[i].fh);
		if (!h) {
			/* Not registered here: NVIDIA's libcufile judges it. */
			pass[npass++] = iocbp[i];
			continue;
		}
		if (iocbp[i].mode != CUFILE_BATCH ||
		    (h->ours && iocbp[i].opcode != CUFILE_READ && iocbp[i].opcode != CUFILE_WRITE)) {
			e.err = CU_FILE_INVALID_VALUE;
			break;
		}
		if (h->ours && iocbp[i].opcode == CUFILE_WRITE) {
			writes[nwrites++] = (struct batch_write){h, i}; /* below, in file order */
			continue;
		}
		if (h->ours) {
			ssize_t ret;
			CUdeviceptr dst = (CUdeviceptr)(uintptr_t)iocbp[i].u.batch.devPtr_base +
					  (CUdeviceptr)iocbp[i].u.batch.devPtr_offset;
			if (serve(h, OP_READ, dst, iocbp[i].u.batch.size, iocbp[i].u.batch.file_offset, &ret) != FALLBACK) {
				e.err = batch_done(b, iocbp[i].cookie, ret);
				continue;
			}
		}
		CUfileHandle_t rh = h->real;
		if (h->ours && (e.err = real_handle(h, &rh)) != CU_FILE_SUCCESS)
			break;
		pass[npass] = iocbp[i];
		pass[npass].fh = rh;
		npass++;
	}
	/* A batch's entries have no order; the daemon takes a file's writes
	 * in order only: they are served by file offset. */
	qsort_r(writes, nwrites, sizeof(*writes), by_file_order, iocbp);
	for (unsigned k = 0; k < nwrites && e.err == CU_FILE_SUCCESS; k++) {
		struct handle *h = writes[k].h;
		const CUfileIOParams_t *io = &iocbp[writes[k].i];
		ssize_t ret;
		CUdeviceptr src = (CUdeviceptr)(uintptr_t)io->u.batch.devPtr_base + (CUdeviceptr)io->u.batch.devPtr_offset;
		if (serve(h, OP_WRITE, src, io->u.batch.size, io->u.batch.file_offset, &ret) != FALLBACK) {
			e.err = batch_done(b, io->cookie, ret);
			continue;
		}
		CUfileHandle_t rh;
		if ((e.err = real_handle(h, &rh)) != CU_FILE_SUCCESS)
			break;
		pass[npass] = *io;
		pass[npass].fh = rh;
		npass++;
	}
	free(writes);
	if (e.err == CU_FILE_SUCCESS && npass > 0) {
		__typeof__(&cuFileBatchIOSubmit) submit = REAL(cuFileBatchIOSubmit);
		if (!submit || !b->real_ok) {
			warn_no_real();
			e.err = CU_FILE_DRIVER_NOT_INITIALIZED;
		} else {
			e = submit(b->real, npass, pass, flags);
		}
	}
	free(pass);
	dbg("batch %p: submitted %u, %u passed to the real libcufile: %d", (void *)b, nr, npass, (int)e.err);
	return e;
}

EXPORT CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
					    CUfileIOEvents_t *iocbp, struct timespec *timeout)
{
	if (!nr || !iocbp)
		return status(CU_FILE_INVALID_VALUE);
	__typeof__(&cuFileBatchIOGetStatus) st = REAL(cuFileBatchIOGetStatus);
	pthread_mutex_lock(&mu);
	struct batch *b = find_batch(batch_idp);
	if (!b) {
		pthread_mutex_unlock(&mu);
		return st ? st(batch_idp, min_nr, nr, iocbp, timeout) : status(CU_FILE_INVALID_VALUE);
	}
	unsigned room = *nr, got = 0;
	while (got < room && b->ndone > 0) {
		iocbp[got++] = b->done[0];
		memmove(b->done, b->done + 1, (--b->ndone) * sizeof(*b->done));
	}
	int real_ok = b->real_ok;
	CUfileBatchHandle_t rb = b->real;
	pthread_mutex_unlock(&mu);
	CUfileError_t e = status(CU_FILE_SUCCESS);
	if (real_ok && st && got < room) {
		unsigned more = room - got;
		e = st(rb, min_nr > got ? min_nr - got : 0, &more, iocbp + got, timeout);
		if (e.err == CU_FILE_SUCCESS)
			got += more;
	}
	*nr = got;
	return e;
}

EXPORT CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch_idp)
{
	__typeof__(&cuFileBatchIOCancel) cancel = REAL(cuFileBatchIOCancel);
	pthread_mutex_lock(&mu);
	struct batch *b = find_batch(batch_idp);
	if (!b) {
		pthread_mutex_unlock(&mu);
		return cancel ? cancel(batch_idp) : status(CU_FILE_INVALID_VALUE);
	}
	b->ndone = 0;
	int real_ok = b->real_ok;
	CUfileBatchHandle_t rb = b->real;
	pthread_mutex_unlock(&mu);
	if (real_ok && cancel)
		return cancel(rb);
	return status(CU_FILE_SUCCESS);
}

EXPORT void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp)
{
	pthread_mutex_lock(&mu);
	struct batch **pp = &batches;
	while (*pp && (CUfileBatchHandle_t)*pp != batch_idp)
		pp = &(*pp)->next;
	struct batch *b = *pp;
	if (b)
		*pp = b->next;
	pthread_mutex_unlock(&mu);
	__typeof__(&cuFileBatchIODestroy) destroy = REAL(cuFileBatchIODestroy);
	if (!b) {
		if (destroy)
			destroy(batch_idp);
		return;
	}
	if (b->real_ok && destroy)
		destroy(b->real);
	free(b->done);
	free(b);
}

/* ---- the driver ----
 *
 * Programs probe these before they use cuFile at all. Mount files need no
 * driver, so where NVIDIA's libcufile is missing, or refuses (no nvidia-fs,
 * compatibility mode off), the answers are the library's own: success, and
 * properties that say cuFile is there with GDS's defaults. */

static int real_open_refused; /* libcufile's cuFileDriverOpen failed and success was answered */

/* The properties answered without libcufile: GDS's defaults (cufile.json),
 * as set by cuFileDriverSet*. Sizes in KiB, as cufile.h has them. */
static pthread_mutex_t props_mu = PTHREAD_MUTEX_INITIALIZER;
static CUfileDrvProps_t own_props = {
	.nvfs =
		{
			.major_version = S3GDSFS_CUFILE_VERSION / 1000,
			.minor_version = S3GDSFS_CUFILE_VERSION % 1000 / 10,
			.poll_thresh_size = 4,          /* poll_mode_max_size_kb */
			.max_direct_io_size = 16 << 10, /* max_direct_io_size_kb */
		},
	.fflags = 1u << CU_FILE_BATCH_IO_SUPPORTED | 1u << CU_FILE_STREAMS_SUPPORTED,
	.max_device_cache_size = 128 << 10,     /* max_device_cache_size_kb */
	.per_buffer_cache_size = 1 << 10,       /* per_buffer_cache_size_kb */
	.max_device_pinned_mem_size = 32 << 20, /* max_device_pinned_mem_size_kb */
	.max_batch_io_size = 128,
	.max_batch_io_timeout_msecs = 5,
};

EXPORT CUfileError_t cuFileDriverOpen(void)
{
	__typeof__(&cuFileDriverOpen) real = REAL(cuFileDriverOpen);
	if (real) {
		CUfileError_t e = real();
		dbg("driver open: real libcufile answered %d", (int)e.err);
		if (e.err != CU_FILE_SUCCESS && e.err != CU_FILE_DRIVER_ALREADY_OPEN) {
			/* Files on mounts are still served; libcufile judges the rest
			 * when they are registered. */
			__atomic_store_n(&real_open_refused, 1, __ATOMIC_RELAXED);
			dbg("driver open: answering success: s3gdsfs files need no driver");
			return status(CU_FILE_SUCCESS);
		}
		return e;
	}
	warn_no_real();
	return status(CU_FILE_SUCCESS);
}

static CUfileError_t driver_close(CUfileError_t (*real)(void))
{
	if (!real)
		return status(CU_FILE_SUCCESS);
	CUfileError_t e = real();
	if (e.err != CU_FILE_SUCCESS && __atomic_load_n(&real_open_refused, __ATOMIC_RELAXED))
		return status(CU_FILE_SUCCESS); /* its open failed: nothing of its to close */
	return e;
}

EXPORT CUfileError_t cuFileDriverClose(void)
{
	return driver_close(REAL(cuFileDriverClose));
}

/* cufile.h of CUDA 12 defines cuFileDriverClose as cuFileDriverClose_v2. */
EXPORT CUfileError_t cuFileDriverClose_v2(void)
{
	__typeof__(&cuFileDriverClose_v2) real = REAL(cuFileDriverClose_v2);
	if (real)
		return driver_close(real);
	return cuFileDriverClose();
}

EXPORT long cuFileUseCount(void)
{
	__typeof__(&cuFileUseCount) real = REAL(cuFileUseCount);
	return real ? real() : 0;
}

EXPORT CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props)
{
	if (!props)
		return status(CU_FILE_INVALID_VALUE);
	__typeof__(&cuFileDriverGetProperties) real = REAL(cuFileDriverGetProperties);
	if (real) {
		CUfileError_t e = real(props);
		if (e.err == CU_FILE_SUCCESS) {
			/* Version 0.0 says "no nvidia-fs" (kvikio's is_gds_available
			 * reads false); mount files are served all the same. */
			if (props->nvfs.major_version == 0 && props->nvfs.minor_version == 0) {
				props->nvfs.major_version = own_props.nvfs.major_version;
				props->nvfs.minor_version = own_props.nvfs.minor_version;
			}
			return e;
		}
		dbg("driver properties: real libcufile answered %d; answering the library's own", (int)e.err);
	}
	pthread_mutex_lock(&props_mu);
	*props = own_props;
	pthread_mutex_unlock(&props_mu);
	return status(CU_FILE_SUCCESS);
}

EXPORT CUfileError_t cuFileGetVersion(int *version)
{
	if (!version)
		return status(CU_FILE_INVALID_VALUE);
	__typeof__(&cuFileGetVersion) real = REAL(cuFileGetVersion);
	if (real)
		return real(version);
	*version = S3GDSFS_CUFILE_VERSION;
	return status(CU_FILE_SUCCESS);
}

/* The settings below are kept for the properties answered without
 * libcufile, and passed to libcufile where there is one. */

EXPORT CUfileError_t cuFileDriverSetPollMode(bool poll, size_t poll_threshold_size)
{
	pthread_mutex_lock(&props_mu);
	if (poll)
		own_props.nvfs.dcontrolflags |= 1u << CU_FILE_USE_POLL_MODE;
	else
		own_props.nvfs.dcontrolflags &= ~(1u << CU_FILE_USE_POLL_MODE);
	own_props.nvfs.poll_thresh_size = poll_threshold_size;
	pthread_mutex_unlock(&props_mu);
	__typeof__(&cuFileDriverSetPollMode) real = REAL(cuFileDriverSetPollMode);
	return real ? real(poll, poll_threshold_size) : status(CU_FILE_SUCCESS);
}

EXPORT CUfileError_t cuFileDriverSetMaxDirectIOSize(size_t max_direct_io_size)
{
	pthread_mutex_lock(&props_mu);
	own_props.nvfs.max_direct_io_size = max_direct_io_size;
	pthread_mutex_unlock(&props_mu);
	__typeof__(&cuFileDriverSetMaxDirectIOSize) real = REAL(cuFileDriverSetMaxDirectIOSize);
	return real ? real(max_direct_io_size) : status(CU_FILE_SUCCESS);
}

EXPORT CUfileError_t cuFileDriverSetMaxCacheSize(size_t max_cache_size)
{
	pthread_mutex_lock(&props_mu);
	own_props.max_device_cache_size = (unsigned)max_cache_size;
	pthread_mutex_unlock(&props_mu);
	__typeof__(&cuFileDriverSetMaxCacheSize) real = REAL(cuFileDriverSetMaxCacheSize);
	return real ? real(max_cache_size) : status(CU_FILE_SUCCESS);
}

EXPORT CUfileError_t cuFileDriverSetMaxPinnedMemSize(size_t max_pinned_size)
{
	pthread_mutex_lock(&props_mu);
	own_props.max_device_pinned_mem_size = (unsigned)max_pinned_size;
	pthread_mutex_unlock(&props_mu);
	__typeof__(&cuFileDriverSetMaxPinnedMemSize) real = REAL(cuFileDriverSetMaxPinnedMemSize);
	return real ? real(max_pinned_size) : status(CU_FILE_SUCCESS);
}

EXPORT CUfileError_t cuFileStreamRegister(CUstream stream, unsigned flags)
{
	__typeof__(&cuFileStreamRegister) real = REAL(cuFileStreamRegister);
	return real ? real(stream, flags) : status(CU_FILE_SUCCESS);
}

EXPORT CUfileError_t cuFileStreamDeregister(CUstream stream)
{
	__typeof__(&cuFileStreamDeregister) real = REAL(cuFileStreamDeregister);
	return real ? real(stream) : status(CU_FILE_SUCCESS);
}
