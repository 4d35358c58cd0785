package rdmaread

import "github.com/s3gdsfs/s3gdsfs/rdmatoken"

// The token format and limits live in rdmatoken, which the S3 access layer
// can import too; these names let the engine's callers stay in rdmaread.

// Token is an x-amz-rdma-token (see rdmatoken.Token).
type Token = rdmatoken.Token

// Part is one piece of a split read (see rdmatoken.Part).
type Part = rdmatoken.Part

// Limits of S3 over RDMA (see rdmatoken).
const (
	MaxRegistration = rdmatoken.MaxRegistration
	MaxServerOp     = rdmatoken.MaxServerOp
)

// ParseToken reads a token in exactly the 81-character wire form.
func ParseToken(s string) (Token, error) { return rdmatoken.Parse(s) }
