/*
 * fake_cufile.c - a stand-in for NVIDIA's libcufile.so.0 in tests: it logs
 * every call, one line, to $FAKE_CUFILE_LOG (appending), and serves reads
 * and writes with pread/pwrite on the registered fd into host memory, as
 * cuFile's compatibility mode does. Handles it did not give out answer
 * CU_FILE_HANDLE_NOT_REGISTERED.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

typedef struct { int err; int cu_err; } CUfileError_t;
typedef struct {
	int type;
	union { int fd; void *handle; } handle;
	const void *fs_ops;
} CUfileDescr_t;
typedef void *CUfileHandle_t;
typedef void *CUstream;
typedef struct {
	int mode;
	struct { void *devPtr_base; off_t file_offset; off_t devPtr_offset; size_t size; } batch;
	CUfileHandle_t fh;
	int opcode;
	void *cookie;
} CUfileIOParams_t;
typedef struct { void *cookie; int status; size_t ret; } CUfileIOEvents_t;

#define HANDLE_NOT_REGISTERED 5027
#define INVALID_VALUE 5022

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void logf_(const char *fmt, ...)
{
	const char *path = getenv("FAKE_CUFILE_LOG");
	if (!path)
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&mu);
	FILE *f = fopen(path, "a");
	if (f) {
		fprintf(f, "%s\n", line);
		fclose(f);
	}
	pthread_mutex_unlock(&mu);
}

static CUfileError_t st(int err) { CUfileError_t e = {err, 0}; return e; }

struct fh { struct fh *next; int fd; };
static struct fh *fhs;

static struct fh *find(CUfileHandle_t h)
{
	pthread_mutex_lock(&mu);
	struct fh *f = fhs;
	while (f && (void *)f != h)
		f = f->next;
	pthread_mutex_unlock(&mu);
	return f;
}

/* $FAKE_CUFILE_NO_NVFS: the driver calls fail as NVIDIA's do without
 * nvidia-fs and with compatibility mode off. */
static bool no_nvfs(void) { return getenv("FAKE_CUFILE_NO_NVFS") != NULL; }
#define NVFS_DRIVER_ERROR 5010
#define DRIVER_NOT_INITIALIZED 5001

CUfileError_t cuFileDriverOpen(void) { logf_("cuFileDriverOpen"); return st(no_nvfs() ? NVFS_DRIVER_ERROR : 0); }
CUfileError_t cuFileDriverClose(void) { logf_("cuFileDriverClose"); return st(no_nvfs() ? DRIVER_NOT_INITIALIZED : 0); }
CUfileError_t cuFileDriverClose_v2(void) { logf_("cuFileDriverClose_v2"); return st(no_nvfs() ? DRIVER_NOT_INITIALIZED : 0); }
long cuFileUseCount(void) { return 1; }
CUfileError_t cuFileGetVersion(int *v) { logf_("cuFileGetVersion"); *v = 1150; return st(0); }
/* Compatibility mode's answer: nvfs version 0.0 (no nvidia-fs), the rest zero. */
CUfileError_t cuFileDriverGetProperties(void *p)
{
	logf_("cuFileDriverGetProperties");
	if (no_nvfs())
		return st(DRIVER_NOT_INITIALIZED);
	memset(p, 0, 56); /* sizeof(CUfileDrvProps_t) */
	return st(0);
}

CUfileError_t cuFileHandleRegister(CUfileHandle_t *out, CUfileDescr_t *d)
{
	struct stat sb;
	if (!out || !d || d->type != 1 || fstat(d->handle.fd, &sb) != 0) {
		logf_("cuFileHandleRegister fd=%d -> %d", d ? d->handle.fd : -1, INVALID_VALUE);
		return st(INVALID_VALUE);
	}
	struct fh *f = calloc(1, sizeof(*f));
	f->fd = d->handle.fd;
	pthread_mutex_lock(&mu);
	f->next = fhs;
	fhs = f;
	pthread_mutex_unlock(&mu);
	*out = f;
	logf_("cuFileHandleRegister fd=%d -> 0", f->fd);
	return st(0);
}

void cuFileHandleDeregister(CUfileHandle_t h)
{
	pthread_mutex_lock(&mu);
	struct fh **pp = &fhs;
	while (*pp && (void *)*pp != h)
		pp = &(*pp)->next;
	struct fh *f = *pp;
	if (f)
		*pp = f->next;
	pthread_mutex_unlock(&mu);
	logf_("cuFileHandleDeregister fd=%d", f ? f->fd : -1);
	free(f);
}

CUfileError_t cuFileBufRegister(const void *p, size_t n, int flags)
{
	logf_("cuFileBufRegister %p %zu %d", p, n, flags);
	return st(0);
}

CUfileError_t cuFileBufDeregister(const void *p)
{
	logf_("cuFileBufDeregister %p", p);
	return st(0);
}

static ssize_t do_read(struct fh *f, void *base, size_t size, off_t off, off_t boff)
{
	size_t done = 0;
	while (done < size) {
		ssize_t n = pread(f->fd, (char *)base + boff + done, size - done, off + (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

ssize_t cuFileRead(CUfileHandle_t h, void *base, size_t size, off_t off, off_t boff)
{
	struct fh *f = find(h);
	if (!f) {
		logf_("cuFileRead unknown handle");
		return -HANDLE_NOT_REGISTERED;
	}
	ssize_t r = do_read(f, base, size, off, boff);
	logf_("cuFileRead fd=%d size=%zu off=%lld boff=%lld -> %zd", f->fd, size, (long long)off, (long long)boff, r);
	return r;
}

ssize_t cuFileWrite(CUfileHandle_t h, const void *base, size_t size, off_t off, off_t boff)
{
	struct fh *f = find(h);
	if (!f)
		return -HANDLE_NOT_REGISTERED;
	ssize_t r = pwrite(f->fd, (const char *)base + boff, size, off);
	logf_("cuFileWrite fd=%d size=%zu off=%lld -> %zd", f->fd, size, (long long)off, r);
	return r;
}

CUfileError_t cuFileReadAsync(CUfileHandle_t h, void *base, size_t *size, off_t *off, off_t *boff, ssize_t *got, CUstream s)
{
	(void)s;
	struct fh *f = find(h);
	if (!f)
		return st(HANDLE_NOT_REGISTERED);
	*got = do_read(f, base, *size, *off, *boff);
	logf_("cuFileReadAsync fd=%d size=%zu -> %zd", f->fd, *size, *got);
	return st(0);
}

CUfileError_t cuFileWriteAsync(CUfileHandle_t h, void *base, size_t *size, off_t *off, off_t *boff, ssize_t *done, CUstream s)
{
	(void)s;
	struct fh *f = find(h);
	if (!f)
		return st(HANDLE_NOT_REGISTERED);
	*done = pwrite(f->fd, (const char *)base + *boff, *size, *off);
	logf_("cuFileWriteAsync fd=%d size=%zu -> %zd", f->fd, *size, *done);
	return st(0);
}

CUfileError_t cuFileStreamRegister(CUstream s, unsigned flags) { (void)s; (void)flags; return st(0); }
CUfileError_t cuFileStreamDeregister(CUstream s) { (void)s; return st(0); }

/* Batches complete at submission. */
struct batch { unsigned nr, ndone; CUfileIOEvents_t *ev; };

CUfileError_t cuFileBatchIOSetUp(void **b, unsigned nr)
{
	struct batch *x = calloc(1, sizeof(*x));
	x->nr = nr;
	x->ev = calloc(nr, sizeof(*x->ev));
	*b = x;
	logf_("cuFileBatchIOSetUp %u", nr);
	return st(0);
}

CUfileError_t cuFileBatchIOSubmit(void *b, unsigned nr, CUfileIOParams_t *io, unsigned flags)
{
	(void)flags;
	struct batch *x = b;
	for (unsigned i = 0; i < nr; i++) {
		struct fh *f = find(io[i].fh);
		if (!f)
			return st(HANDLE_NOT_REGISTERED);
		ssize_t r = io[i].opcode == 1 /* CUFILE_WRITE */
				    ? pwrite(f->fd, (const char *)io[i].batch.devPtr_base + io[i].batch.devPtr_offset,
					     io[i].batch.size, io[i].batch.file_offset)
				    : do_read(f, io[i].batch.devPtr_base, io[i].batch.size, io[i].batch.file_offset,
					      io[i].batch.devPtr_offset);
		x->ev[x->ndone].cookie = io[i].cookie;
		x->ev[x->ndone].status = r >= 0 ? 0x10 : 0x40;
		x->ev[x->ndone].ret = (size_t)r;
		x->ndone++;
	}
	logf_("cuFileBatchIOSubmit %u", nr);
	return st(0);
}

CUfileError_t cuFileBatchIOGetStatus(void *b, unsigned min_nr, unsigned *nr, CUfileIOEvents_t *ev, struct timespec *t)
{
	(void)min_nr;
	(void)t;
	struct batch *x = b;
	unsigned n = 0;
	while (n < *nr && x->ndone > 0) {
		ev[n++] = x->ev[0];
		memmove(x->ev, x->ev + 1, (--x->ndone) * sizeof(*x->ev));
	}
	*nr = n;
	return st(0);
}

CUfileError_t cuFileBatchIOCancel(void *b) { ((struct batch *)b)->ndone = 0; return st(0); }
void cuFileBatchIODestroy(void *b) { free(((struct batch *)b)->ev); free(b); }
