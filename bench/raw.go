package main

import (
	"context"
	"fmt"

	"github.com/minio/minio-go/v7"
	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

const (
	rangeSize    = 16 << 20
	rangeWorkers = 8
)

// rawTrials are minio-go's reads straight from the server, the ceiling a
// filesystem on the same machine can hope to approach: one GET stream, 16
// MiB ranges with 8 workers, and four workers; verify then checks every
// object's sha256 untimed.
func rawTrials(cfg config, srv *testenv.Server, sets objectSets, h hooks) (trials []*trial, verify func(ctx context.Context)) {
	set := sets.forRun(0) // sizes and names; every copy has the same shape
	get := func(ctx context.Context, o object, off, end int64) (int64, error) {
		opts := minio.GetObjectOptions{}
		if off != 0 || end != o.Size {
			if err := opts.SetRange(off, end-1); err != nil {
				return 0, err
			}
		}
		obj, err := srv.Client.GetObject(ctx, bucketName, o.Key, opts)
		if err != nil {
			return 0, err
		}
		defer obj.Close()
		return drain(ctx, o, off, obj)
	}

	single := &measurement{Target: "raw", Test: "single", Bytes: set.Large.Size,
		Description: "minio-go, one GET stream of " + set.Large.Key}
	trials = append(trials, newTrial(cfg, single, h, func(ctx context.Context, run int) (int64, error) {
		large := sets.forRun(run).Large
		return get(ctx, large, 0, large.Size)
	}))

	ranges := &measurement{Target: "raw", Test: "ranges", Bytes: set.Large.Size,
		Description: fmt.Sprintf("minio-go, %s in 16 MiB ranges, %d workers", set.Large.Key, rangeWorkers)}
	// inRanges reads o in ranges of part bytes, workers at a time.
	inRanges := func(ctx context.Context, o object, part int64, workers int) (int64, error) {
		var jobs []func(context.Context) (int64, error)
		for off := int64(0); off < o.Size; off += part {
			end := min(off+part, o.Size)
			jobs = append(jobs, func(ctx context.Context) (int64, error) { return get(ctx, o, off, end) })
		}
		return parallel(ctx, workers, jobs)
	}
	trials = append(trials, newTrial(cfg, ranges, h, func(ctx context.Context, run int) (int64, error) {
		return inRanges(ctx, sets.forRun(run).Large, rangeSize, rangeWorkers)
	}))

	preads := &measurement{Target: "raw", Test: "preads", Bytes: set.Large.Size,
		Description: fmt.Sprintf("minio-go, %s in %d MiB ranges, %d workers", set.Large.Key, preadChunk>>20, preadThreads)}
	trials = append(trials, newTrial(cfg, preads, h, func(ctx context.Context, run int) (int64, error) {
		return inRanges(ctx, sets.forRun(run).Large, preadChunk, preadThreads)
	}))

	four := &measurement{Target: "raw", Test: "four", Bytes: set.mediumBytes(),
		Description: "minio-go, 4 workers, one medium object each"}
	trials = append(trials, newTrial(cfg, four, h, func(ctx context.Context, run int) (int64, error) {
		var jobs []func(context.Context) (int64, error)
		for _, o := range sets.forRun(run).Medium {
			jobs = append(jobs, func(ctx context.Context) (int64, error) { return get(ctx, o, 0, o.Size) })
		}
		return parallel(ctx, len(jobs), eachTimed(four, jobs))
	}))

	verify = func(ctx context.Context) {
		// The untimed full check that the server holds what was uploaded.
		progress("raw: verifying sha256 of every object")
		var verifyErr error
		for _, o := range sets.all() {
			if verifyErr = verifyRawObject(ctx, srv, o); verifyErr != nil {
				break
			}
		}
		markVerified([]*measurement{single, ranges, preads, four}, verifyErr)
	}
	return trials, verify
}

func verifyRawObject(ctx context.Context, srv *testenv.Server, o object) error {
	obj, err := srv.Client.GetObject(ctx, bucketName, o.Key, minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer obj.Close()
	return hashAll(o, obj)
}

// markVerified records the outcome of the full sha256 pass.
func markVerified(ms []*measurement, err error) {
	for _, m := range ms {
		switch {
		case err != nil && m.Error == "":
			m.Error = "sha256 verification: " + err.Error()
		case err == nil && m.ok():
			m.Verified = true
		}
	}
}
