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

func newObjectSet(scale float64) objectSet {
	set := objectSet{Large: object{Key: "large.bin", Size: scaled(gib, scale), Seed: 1000}}
	for i := 1; i <= 4; i++ {
		set.Medium = append(set.Medium, object{
			Key:  fmt.Sprintf("medium-%d.bin", i),
			Size: scaled(256*mib, scale),
			Seed: int64(1000 + i),
		})
	}
	return set
}

// scaled rounds size*scale to whole MiB, at least one.
func scaled(size int64, scale float64) int64 {
	n := int64(math.Round(float64(size)*scale/float64(mib))) * mib
	return max(n, mib)
}

// upload creates the bucket and stores every object, filling in checksums.
func (s *objectSet) upload(ctx context.Context, srv *testenv.Server) error {
	if err := srv.MakeBucket(ctx, bucketName); err != nil {
		return err
	}
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
