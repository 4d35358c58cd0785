package rdmaread

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/s3gdsfs/s3gdsfs/abi"
	"github.com/s3gdsfs/s3gdsfs/objstore"
	"github.com/s3gdsfs/s3gdsfs/rdmaread/mint"
)

func TestDeclineFor(t *testing.T) {
	cases := []struct {
		rep  objstore.RDMAReply
		err  error
		want abi.Decline
	}{
		{objstore.RDMAReply{Outcome: objstore.RDMAServed}, nil, abi.DeclineNone},
		{objstore.RDMAReply{Outcome: objstore.RDMADeclined501}, nil, abi.DeclineServer501},
		{objstore.RDMAReply{Outcome: objstore.RDMATokenIgnored}, nil, abi.DeclineTokenIgnored},
		{objstore.RDMAReply{Outcome: objstore.RDMAShortTransfer}, nil, abi.DeclineShortTransfer},
		{objstore.RDMAReply{}, fmt.Errorf("x: %w", mint.ErrTooLarge), abi.DeclineTooLarge},
		{objstore.RDMAReply{}, fmt.Errorf("x: %w", mint.ErrNoMinter), abi.DeclineRDMAUnavailable},
		{objstore.RDMAReply{}, fmt.Errorf("x: %w", mint.ErrRegistrationFailed), abi.DeclineRegistrationFailed},
		{objstore.RDMAReply{}, fmt.Errorf("x: %w", objstore.ErrTokenRejected), abi.DeclineTokenRejected},
		{objstore.RDMAReply{}, fmt.Errorf("x: %w", context.DeadlineExceeded), abi.DeclineTimeout},
		{objstore.RDMAReply{}, errors.New("500 InternalError"), abi.DeclineRDMAError},
	}
	for _, c := range cases {
		if got := DeclineFor(c.rep, c.err); got != c.want {
			t.Errorf("DeclineFor(%v, %v) = %v, want %v", c.rep.Outcome, c.err, got, c.want)
		}
	}
}
