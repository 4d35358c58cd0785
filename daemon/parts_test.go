package daemon

import (
	"context"
	"errors"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/internal/setting"
	"github.com/s3gdsfs/s3gdsfs/metrics"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/loopback"
)

// onlyStore is a decorator that hands over neither raw bodies nor RDMA
// replies, as most tests' decorators are.
type onlyStore struct{ objstore.Store }

// rawOnly hands over raw bodies and no RDMA replies.
type rawOnly struct {
	objstore.Store
	objstore.RawGetter
}

// A store handed in is metered, and the metered store offers the read
// paths a raw GET or an RDMA GET only where the store itself takes them:
// a decorator that hides them is not tried for them.
func TestMeteredStoreKeepsWhatTheStoreTakes(t *testing.T) {
	m := metrics.New(func() float64 { return 0 }, func() float64 { return 0 })
	client, err := NewStore(withEndpoint(Default()))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		store     objstore.Store
		raw, rdma bool
	}{
		{"the client", client, true, true},
		{"a decorator of the interface", onlyStore{client}, false, false},
		{"a decorator with raw GETs", rawOnly{client, client}, true, false},
	} {
		s := metered(c.store, m)
		if _, ok := s.(objstore.RawGetter); ok != c.raw {
			t.Errorf("%s: metered store a RawGetter %v, want %v", c.name, ok, c.raw)
		}
		if _, ok := s.(objstore.RDMAGetter); ok != c.rdma {
			t.Errorf("%s: metered store an RDMAGetter %v, want %v", c.name, ok, c.rdma)
		}
	}
	// It is metered: a call through it is counted.
	s := metered(onlyStore{failing{}}, m)
	if _, err := s.Stat(context.Background(), "b", "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("stat: %v", err)
	}
	snap, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := snap["s3_requests_total"].(map[string]float64); got["head,not_found"] != 1 {
		t.Errorf("s3_requests_total %v, want one head,not_found", snap["s3_requests_total"])
	}
}

// A loopback fabric handed to a mount that does not use one is refused,
// naming the setting, before anything is mounted.
func TestFabricWithoutLoopbackRDMAIsRefused(t *testing.T) {
	cfg := withEndpoint(Default())
	cfg.Mountpoint = t.TempDir()
	cfg.GPU.RDMA = "off"
	_, err := Start(cfg, WithFabric(loopback.NewFabric()))
	var se *setting.Error
	if !errors.As(err, &se) || se.Name != "GPU.RDMA" {
		t.Fatalf("Start: %v, want a refusal of GPU.RDMA", err)
	}
}

func withEndpoint(cfg Config) Config {
	cfg.S3.Endpoint = "http://127.0.0.1:1"
	return cfg
}

// failing answers every Stat with ErrNotFound.
type failing struct{ objstore.Store }

func (failing) Stat(context.Context, string, string) (objstore.Object, error) {
	return objstore.Object{}, objstore.ErrNotFound
}
