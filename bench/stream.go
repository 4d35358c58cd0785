package main

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"
)

// readSize is the size of each read call: 1 MiB, as a typical loader does.
const readSize = 1 << 20

// drain reads r to the end in readSize calls, spot-checking each chunk
// as bytes of o starting at off, and returns the byte count.
func drain(ctx context.Context, o object, off int64, r io.Reader) (int64, error) {
	buf := make([]byte, readSize)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := r.Read(buf)
		if n > 0 {
			if cerr := spotCheck(o, off+total, buf[:n]); cerr != nil {
				return total, cerr
			}
			total += int64(n)
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// parallel runs jobs on workers goroutines and sums their byte counts;
// the first error cancels the rest.
// eachTimed wraps jobs run at once so that each notes its own rate in m
// (measurement.ReaderGBps).
func eachTimed(m *measurement, jobs []func(context.Context) (int64, error)) []func(context.Context) (int64, error) {
	rates := make([]float64, len(jobs))
	m.readers = rates
	timed := make([]func(context.Context) (int64, error), len(jobs))
	for i, job := range jobs {
		timed[i] = func(ctx context.Context) (int64, error) {
			start := time.Now()
			n, err := job(ctx)
			rates[i] = float64(n) / time.Since(start).Seconds() / 1e9
			return n, err
		}
	}
	return timed
}

func parallel(ctx context.Context, workers int, jobs []func(context.Context) (int64, error)) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan func(context.Context) (int64, error))
	var (
		mu       sync.Mutex
		total    int64
		firstErr error
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range queue {
				n, err := job(ctx)
				mu.Lock()
				total += n
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, job := range jobs {
		select {
		case queue <- job:
		case <-ctx.Done():
			break feed
		}
	}
	close(queue)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return total, firstErr
}

// The shape of parallel loaders' reads of one large file (and of cuFile's
// compatibility mode): threads that each take the next chunk and read it
// with one pread, on one descriptor.
const (
	preadThreads = 16
	preadChunk   = 64 << 20
)

// preadBuffers holds the chunks' buffers between jobs.
var preadBuffers = sync.Pool{New: func() any { b := make([]byte, preadChunk); return &b }}

// preadJobs reads o through f in chunks of preadChunk, one pread each
// (ReadAt loops where the kernel returns less), every chunk spot-checked.
func preadJobs(o object, f *os.File) []func(context.Context) (int64, error) {
	var jobs []func(context.Context) (int64, error)
	for off := int64(0); off < o.Size; off += preadChunk {
		jobs = append(jobs, func(ctx context.Context) (int64, error) {
			bp := preadBuffers.Get().(*[]byte)
			defer preadBuffers.Put(bp)
			buf := (*bp)[:min(preadChunk, o.Size-off)]
			n, err := f.ReadAt(buf, off)
			if err != nil && !(errors.Is(err, io.EOF) && n == len(buf)) {
				return int64(n), err
			}
			return int64(n), spotCheck(o, off, buf[:n])
		})
	}
	return jobs
}
