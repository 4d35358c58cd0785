package main

import (
	"context"
	"fmt"
	"math"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30

	bucketName = "bench"
)

// object is one benchmark object; its content is testenv.RandomData(Size, Seed).
type object struct {
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	Seed   int64  `json:"seed"`
	SHA256 string `json:"sha256"`
}

// objectSet is what every target reads: one large object for the single
// reader tests and four medium ones for the concurrent tests.
type objectSet struct {
	Large  object   `json:"large"`
	Medium []object `json:"medium"`
}

func (s objectSet) all() []object { return append([]object{s.Large}, s.Medium...) }

func (s objectSet) mediumBytes() int64 {
	var n int64
	for _, o := range s.Medium {
		n += o.Size
	}
	return n
}

func (s objectSet) totalBytes() int64 { return s.Large.Size + s.mediumBytes() }

// objectSets are the copies of the object set: one per timed run with
// -fresh (each run reads data no earlier run read), or one shared by all.
type objectSets []objectSet

// forRun is the set timed run run (0-based) reads.
func (ss objectSets) forRun(run int) objectSet { return ss[run%len(ss)] }

func (ss objectSets) all() []object {
	var out []object
	for _, s := range ss {
		out = append(out, s.all()...)
	}
	return out
}

func (ss objectSets) totalBytes() int64 {
	var n int64
	for _, s := range ss {
		n += s.totalBytes()
	}
	return n
}

// upload creates the bucket and stores every copy, filling in checksums.
func (ss objectSets) upload(ctx context.Context, srv *testenv.Server) error {
	if err := srv.MakeBucket(ctx, bucketName); err != nil {
		return err
	}
	for i := range ss {
		if err := ss[i].upload(ctx, srv); err != nil {
			return err
		}
	}
	return nil
}

func newObjectSets(scale float64, copies int) objectSets {
	var ss objectSets
	for c := 1; c <= copies; c++ {
		suffix := ""
		if copies > 1 {
			suffix = fmt.Sprintf("-r%d", c)
		}
		seed := int64(1000 * c)
		set := objectSet{Large: object{Key: "large" + suffix + ".bin", Size: scaled(gib, scale), Seed: seed}}
		for i := 1; i <= 4; i++ {
			set.Medium = append(set.Medium, object{
				Key:  fmt.Sprintf("medium-%d%s.bin", i, suffix),
				Size: scaled(256*mib, scale),
				Seed: seed + int64(i),
			})
		}
		ss = append(ss, set)
	}
	return ss
}

// scaled rounds size*scale to whole MiB, at least one.
func scaled(size int64, scale float64) int64 {
	n := int64(math.Round(float64(size)*scale/float64(mib))) * mib
	return max(n, mib)
}

// upload stores every object of the set, filling in checksums.
func (s *objectSet) upload(ctx context.Context, srv *testenv.Server) error {
	objs := []*object{&s.Large}
	for i := range s.Medium {
		objs = append(objs, &s.Medium[i])
	}
	for _, o := range objs {
		progress("uploading %s (%s)", o.Key, humanBytes(o.Size))
		sum, err := srv.PutRandom(ctx, bucketName, o.Key, o.Size, o.Seed)
		if err != nil {
			return err
		}
		o.SHA256 = sum
	}
	return nil
}

func humanBytes(n int64) string {
	switch {
	case n >= gib && n%gib == 0:
		return fmt.Sprintf("%d GiB", n/gib)
	case n >= mib:
		return fmt.Sprintf("%d MiB", n/mib)
	default:
		return fmt.Sprintf("%d B", n)
	}
}
