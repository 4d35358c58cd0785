// Package archtest holds the rules of which room may import which
// (docs/architecture.md, "Rooms"), checked by its tests: every package has
// a layer and imports only lower ones, and the command, the demo and the
// FUSE adapter talk to the rest only through daemon and vfs.
package archtest
