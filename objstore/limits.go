package objstore

import (
	"time"

	"github.com/s3gdsfs/s3gdsfs/internal/setting"
)

// ReadLimits bound every GET of object bytes, the core's and the GPU
// engine's alike: one setting for both, declared here, where GETs are.
type ReadLimits struct {
	// ReadTimeout: a GET that makes no progress this long is retried,
	// then fails; it also bounds the wait for a reply's headers.
	ReadTimeout time.Duration
	// Retries is how many times a failed GET is sent again; 0: never.
	Retries int
}

// DefaultReadLimits are the limits of a mount that sets none.
func DefaultReadLimits() ReadLimits {
	return ReadLimits{ReadTimeout: DefaultReadTimeout, Retries: 3}
}

// DefaultReadTimeout is ReadLimits' default, and the client's bound on
// waiting for a reply where Config leaves ResponseTimeout 0.
const DefaultReadTimeout = 30 * time.Second

// Validate refuses a timeout that is not above 0 (a negative one would fail
// every read at once) and a negative retry count.
func (l ReadLimits) Validate() error {
	if l.ReadTimeout <= 0 {
		return setting.Refuse("ReadTimeout", l.ReadTimeout, "must be above 0")
	}
	if l.Retries < 0 {
		return setting.Refuse("Retries", l.Retries, "must be 0 (none) or more")
	}
	return nil
}
