"""The package version: <ABI>.<minor>.<patch>.

The first number is the S3GDS_IOC_READ ABI version this client speaks
(_abi.ABI_VERSION, abi.Version in Go, S3GDS_ABI_VERSION in client/c/s3gds.h):
a client 1.x.y talks to any daemon whose user.s3gdsfs.caps says
"abi_version": 1. The minor number grows with features of the Python package,
the patch number with fixes.
"""

__version__ = "1.1.0"
