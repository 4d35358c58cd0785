package vfs

import (
	"strings"
	"unicode/utf8"
)

// Reasons a key is not shown, used as the skipped-keys metric label.
const (
	skipEmptySegment = "empty_segment"
	skipDotName      = "dot_name"
	skipTooLong      = "too_long"
	skipBadByte      = "bad_byte"
	skipShadowed     = "shadowed_by_directory"
	// A server off the spec: a common prefix without the delimiter at its
	// end, or a key outside the prefix listed.
	skipBadPrefix     = "bad_prefix"
	skipOutsidePrefix = "outside_prefix"
)

// maxNameLen is Linux's NAME_MAX.
const maxNameLen = 255

// skipReplacement is a name with U+FFFD, the replacement character: a
// server that cannot encode a key's bytes in its listing (versitygw lists
// "ctl\x01.txt" as "ctl\uFFFD.txt") names a key no GET finds, so the name
// would stat and fail to open. Listings skip it and lookups do not find it;
// a key that truly holds U+FFFD is hidden with them.
const skipReplacement = "replacement_char"

// skipInvalidUTF8 is a name that is not valid UTF-8: a server that
// URL-encodes its listing's keys (encoding-type=url) hands back the bytes as
// stored, but the S3 client refuses such a key in every request, so the
// name would list and then fail every stat, open and listing with EIO. A
// lookup of such a name is ENOENT without a request.
const skipInvalidUTF8 = "invalid_utf8"

// nameProblem returns why name cannot be a file name in the mount, or "".
func nameProblem(name string) string {
	switch {
	case name == "":
		return skipEmptySegment
	case name == "." || name == "..":
		return skipDotName
	case len(name) > maxNameLen:
		return skipTooLong
	case strings.ContainsRune(name, 0) || strings.ContainsRune(name, '/'):
		return skipBadByte
	case !utf8.ValidString(name):
		return skipInvalidUTF8
	case strings.Contains(name, "\uFFFD"):
		return skipReplacement
	}
	return ""
}

// childName returns the name a listed key or common prefix shows under the
// directory prefix dir, and whether it names a directory. ok is false when
// the key is the directory's own marker object ("dir/").
func childName(dir, key string) (name string, isDir, ok bool) {
	rest := strings.TrimPrefix(key, dir)
	if rest == "" {
		return "", false, false
	}
	if strings.HasSuffix(rest, "/") {
		return rest[:len(rest)-1], true, true
	}
	return rest, false, true
}
