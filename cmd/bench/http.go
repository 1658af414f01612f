package main

import (
	"context"
	"errors"
	"io"
)

func benchHTTP(ctx context.Context, c config, stdout io.Writer) error {
	return errors.New("bench: -http is not built yet")
}
