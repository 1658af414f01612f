// Package migrations holds the goose SQL migrations of Tollgate's schema,
// embedded so that the binaries migrate without files on disk.
//
// Version 2 is River's job tables, registered as a Go migration by
// internal/postgres; new SQL files start at version 3.
package migrations

import "embed"

// FS holds every *.sql migration.
//
//go:embed *.sql
var FS embed.FS
