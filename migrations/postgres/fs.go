package postgres

import (
	"embed"
	"io/fs"
	"slices"
	"strings"

	"github.com/evidence-ledger/ledger/migrations"
)

//go:embed *.sql
var own embed.FS

// FS holds the PostgreSQL migrations, all at its root: this directory's
// *.sql files and the shared ones of package migrations
// (migrations.Shared). It implements fs.ReadDirFS, so fs.Glob and
// fs.ReadDir list both. Safe for concurrent use.
var FS fs.FS = union{own: own, shared: migrations.FS, names: migrations.Shared}

// union serves names from shared and every other path from own.
type union struct {
	own, shared fs.FS
	names       []string
}

// Open implements fs.FS.
func (u union) Open(name string) (fs.File, error) {
	if slices.Contains(u.names, name) {
		return u.shared.Open(name)
	}
	return u.own.Open(name)
}

// ReadDir implements fs.ReadDirFS: own's entries of name, with the shared
// files added at the root, sorted by name.
func (u union) ReadDir(name string) ([]fs.DirEntry, error) {
	ents, err := fs.ReadDir(u.own, name)
	if err != nil || name != "." {
		return ents, err
	}
	for _, n := range u.names {
		info, err := fs.Stat(u.shared, n)
		if err != nil {
			return nil, err
		}
		ents = append(ents, fs.FileInfoToDirEntry(info))
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}
