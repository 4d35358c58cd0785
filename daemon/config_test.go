package daemon

import (
	"strings"
	"testing"
	"time"
)

// Default is a whole, valid configuration once given a mount point and an
// endpoint; a refused setting is named by its path in the tree, which the
// command turns into its flag.
func TestValidateNamesTheSettingByItsPath(t *testing.T) {
	base := Default()
	base.Mountpoint, base.S3.Endpoint = "/mnt", "http://127.0.0.1:1"
	if err := base.Validate(); err != nil {
		t.Fatalf("Default: %v", err)
	}
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Read.ReadTimeout = -time.Second }, "Read.ReadTimeout -1s: must be above 0"},
		{func(c *Config) { c.Read.Retries = -1 }, "Read.Retries -1: "},
		{func(c *Config) { c.S3.ConnectTimeout = 0 }, "S3.ConnectTimeout 0s: must be above 0"},
		{func(c *Config) { c.Core.MetaTTL = -time.Second }, "Core.MetaTTL -1s: "},
		{func(c *Config) { c.Core.BlockSize = 100 }, "Core.BlockSize 100: "},
		{func(c *Config) { c.GPU.Staging.Slots = 0 }, "GPU.Staging.Slots 0: "},
		{func(c *Config) { c.GPU.Streams = 0 }, "GPU.Streams 0: "},
		{func(c *Config) { c.FS.PollRequests = -time.Second }, "FS.PollRequests -1s: "},
		{func(c *Config) { c.FS.MaxRead = 32 << 20 }, "FS.MaxRead 32MiB: a multiple of 4KiB from 128KiB to 16MiB"},
		{func(c *Config) { c.FS.MaxRead = 1<<20 + 1 }, "FS.MaxRead "},
		{func(c *Config) { c.GPU.Mode, c.GPU.RDMA = "off", "loopback" }, "GPU.RDMA loopback: needs GPU reads"},
		{func(c *Config) { c.Splice = "" }, `Splice "": `},
		{func(c *Config) { c.S3.Endpoint = "" }, "S3.Endpoint"},
		{func(c *Config) { c.Core.Writes.Allow, c.Core.Writes.PartSize = true, 1<<20 }, "Core.Writes.PartSize 1MiB: between 5MiB and 5GiB"},
		{func(c *Config) { c.Core.Writes.Allow, c.Core.Writes.PartsInFlight = true, 0 }, "Core.Writes.PartsInFlight 0: "},
		{func(c *Config) { c.Core.Writes.Allow, c.Core.Writes.PartSize = true, 1<<30 }, "Core.Writes.PartSize 1GiB: 16 parts in flight"},
		{func(c *Config) { c.Core.Writes.Allow, c.Core.Writes.CopyPartSize = true, 1<<20 }, "Core.Writes.CopyPartSize 1MiB: between 5MiB and 5GiB"},
		{func(c *Config) { c.Core.Writes.Allow, c.Core.Writes.CopyLimit = true, 6<<30 }, "Core.Writes.CopyLimit 6GiB: between 1 byte and 5GiB"},
	} {
		cfg := base
		c.mod(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "--") {
			t.Errorf("error %v, want one naming %q and no flag", err, c.want)
		}
	}
}
