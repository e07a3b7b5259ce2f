package mgrclient

import (
	"bufio"
	"bytes"
	"context"
	"io"
)

// ConfigStream is an open GET /pools/default/bs/default (Couchbase's
// streaming bucket endpoint): the manager sends its current config, then
// each newer one, every config followed by "\n\n\n\n". One goroutine
// reads it at a time; its caller closes it.
type ConfigStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
}

// StreamConfigs opens the manager's config stream. It returns once the
// manager has answered (it answers at once, before it has a config to
// send); the stream then lasts until ctx ends, the HTTP client's Timeout
// passes, or Close.
func (c *Client) StreamConfigs(ctx context.Context) (*ConfigStream, error) {
	u := c.url("/pools/default/bs/default", nil)
	resp, err := c.send(ctx, "GET", u)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		body, err := c.read(resp.Body)
		if err != nil {
			return nil, err
		}
		return nil, statusError(u, resp.Status, body)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxBody)
	sc.Split(splitConfigs)
	return &ConfigStream{body: resp.Body, sc: sc}, nil
}

// Next returns the next config JSON, waiting for the manager to send it;
// the slice is the caller's. It returns an error when the stream ends: the
// reason a read failed (such as the context's end), or io.ErrUnexpectedEOF
// when the manager closed the stream, which it does not do on its own.
func (s *ConfigStream) Next() ([]byte, error) {
	for s.sc.Scan() {
		if b := bytes.TrimSpace(s.sc.Bytes()); len(b) > 0 {
			return append([]byte(nil), b...), nil
		}
	}
	if err := s.sc.Err(); err != nil {
		return nil, err
	}
	return nil, io.ErrUnexpectedEOF
}

// Close ends the stream.
func (s *ConfigStream) Close() error { return s.body.Close() }

// splitConfigs is a bufio.SplitFunc that cuts the stream after each
// "\n\n\n\n" (and returns what is left at the end).
func splitConfigs(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.Index(data, []byte("\n\n\n\n")); i >= 0 {
		return i + 4, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
