package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// AdminTokenFile is where make run (scripts/run.sh) keeps the admin token it
// generates, under DataDir; TOLLGATE_DEV makes api serve use the same file.
const AdminTokenFile = "admin_token"

// ErrNoAdminToken is why api serve refuses to start without ADMIN_TOKEN: a
// token made up per process would differ between the api instances behind a
// load balancer, and admin calls would fail on every other instance.
var ErrNoAdminToken = errors.New("required by api serve: set it to one secret shared by every api process " +
	"(make run generates one in .data/admin_token), or set TOLLGATE_DEV=true to use that file")

// ResolveAdminToken makes sure AdminToken is set before api serves: from
// ADMIN_TOKEN, or in development (Dev) from DataDir/admin_token, created
// once with a random token when missing. It returns the file it used ("" for
// ADMIN_TOKEN), so that the caller can say where the token is without
// printing it. The error names ADMIN_TOKEN.
func (c *Config) ResolveAdminToken() (string, error) {
	if c.AdminToken != "" {
		return "", nil
	}
	if !c.Dev {
		return "", &Error{Var: "ADMIN_TOKEN", Err: ErrNoAdminToken}
	}
	path := filepath.Join(c.DataDir, AdminTokenFile)
	tok, err := readOrCreateToken(path)
	if err != nil {
		return "", &Error{Var: "ADMIN_TOKEN", Err: fmt.Errorf("TOLLGATE_DEV: %w", err)}
	}
	c.AdminToken = tok
	return path, nil
}

// readOrCreateToken reads the token in path or, when there is none, writes
// a new one (0600). The new file is written aside and hard-linked into
// place, which fails when path exists: processes starting at once never see
// a half-written file and all end up with the one that won.
func readOrCreateToken(path string) (string, error) {
	return readOrCreate(path, func() string {
		var b [24]byte
		_, _ = rand.Read(b[:])
		return "tga_" + hex.EncodeToString(b[:])
	})
}

// readOrCreate reads the value in path or writes the one gen makes (see
// readOrCreateToken).
func readOrCreate(path string, gen func() string) (string, error) {
	for range 3 {
		if b, err := os.ReadFile(path); err == nil {
			if tok := strings.TrimSpace(string(b)); tok != "" {
				return tok, nil
			}
			return "", fmt.Errorf("%s is empty: delete it or put the token in it", path)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", err
		}
		tok := gen()
		f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
		if err != nil {
			return "", err
		}
		_, werr := f.WriteString(tok + "\n")
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = os.Link(f.Name(), path)
		}
		_ = os.Remove(f.Name())
		if werr == nil {
			return tok, nil
		}
		if !errors.Is(werr, fs.ErrExist) {
			return "", werr
		}
		// Another process linked its token first: read theirs.
	}
	return "", fmt.Errorf("%s: could not be read or created", path)
}
