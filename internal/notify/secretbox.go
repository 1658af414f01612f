package notify

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/tollgatehq/tollgate/internal/apperr"
)

// Signing needs the secret itself, so it cannot be hashed: it is kept
// sealed with AES-256-GCM under WEBHOOK_SECRET_KEY ("v1:" + base64 of
// nonce and ciphertext). The endpoint's id is the additional data, so a
// sealed secret copied to another endpoint's row does not open.
const sealedPrefix = "v1:"

// ErrNoSecretKey is why an endpoint cannot be created or signed for: no
// WEBHOOK_SECRET_KEY (TOLLGATE_DEV makes one in the data directory).
var ErrNoSecretKey = apperr.New(apperr.Unavailable,
	"webhook secrets are encrypted at rest: set WEBHOOK_SECRET_KEY (32 bytes, base64) on the api and the worker, or TOLLGATE_DEV=true in development")

// box seals and opens endpoint secrets.
type box struct{ aead cipher.AEAD }

func newBox(key []byte) (*box, error) {
	if key == nil {
		return nil, nil
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("notify: WEBHOOK_SECRET_KEY is %d bytes, want 32", len(key))
	}
	blk, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("notify: secret key: %w", err)
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		return nil, fmt.Errorf("notify: secret key: %w", err)
	}
	return &box{aead: aead}, nil
}

func (b *box) seal(endpointID, secret string) (string, error) {
	if b == nil {
		return "", ErrNoSecretKey
	}
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("notify: seal secret: %w", err)
	}
	out := b.aead.Seal(nonce, nonce, []byte(secret), []byte(endpointID))
	return sealedPrefix + base64.StdEncoding.EncodeToString(out), nil
}

// open returns the secret stored as stored; a row written before secrets
// were sealed (a plain whsec_…) is returned as it is until SealStored
// rewrites it.
func (b *box) open(endpointID, stored string) (string, error) {
	if strings.HasPrefix(stored, "whsec_") {
		return stored, nil
	}
	if b == nil {
		return "", ErrNoSecretKey
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(stored, sealedPrefix))
	if err != nil || !strings.HasPrefix(stored, sealedPrefix) || len(raw) < b.aead.NonceSize() {
		return "", errors.New("notify: a stored secret is not sealed by this version")
	}
	n := b.aead.NonceSize()
	plain, err := b.aead.Open(nil, raw[:n], raw[n:], []byte(endpointID))
	if err != nil {
		return "", errors.New("notify: a stored secret does not open with WEBHOOK_SECRET_KEY (was the key changed?)")
	}
	return string(plain), nil
}
