package objstore

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/s3gdsfs/s3gdsfs/internal/testenv"
)

// A raw body from a store that keeps sending, but fewer bytes per timeout
// than a read waits for at once (its wake-up mark), is not cut: bytes that
// arrived count as progress although they did not wake the reader. Read
// whole, and spliced, every byte comes, in order.
func TestRawBodyOfASlowStoreIsNotCut(t *testing.T) {
	const n = 64 << 10
	const timeout = 300 * time.Millisecond
	// 2 KiB every 50 ms: about 12 KiB per timeout, far below what one
	// read of the body waits for at once.
	body := testenv.RandomBytes(11, 0, n)
	for _, how := range []string{"read", "spliced"} {
		t.Run(how, func(t *testing.T) {
			ep := fakeServer(t, func(c net.Conn) {
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: \"abc\"\r\n\r\n", n)
				for off := 0; off < n; off += 2 << 10 {
					if _, err := c.Write(body[off : off+2<<10]); err != nil {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(time.Minute) // kept open, as a keep-alive server does
			})
			m, err := NewMinio(Config{Endpoint: ep, Region: testenv.Region,
				Credentials: credentials.NewStaticV4("a", "b", ""), ResponseTimeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			b, err := m.GetRaw(context.Background(), "bkt", "key", 0, n, Version{ETag: "abc", Size: n})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			var got []byte
			if how == "read" {
				got = make([]byte, n)
				err = b.ReadFull(got)
			} else {
				got, err = drainRaw(t, b)
			}
			if err != nil {
				t.Fatalf("a body that kept coming was cut: %v", err)
			}
			if !bytes.Equal(got, body) {
				t.Fatalf("%d bytes differ from the body's %d", len(got), n)
			}
		})
	}
}
