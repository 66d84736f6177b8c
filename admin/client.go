package admin

// This file holds the client side of the admin API, for the command
// line (peerd peers, drain, reload, purge, ...): one call per endpoint,
// and errors that tell a refusal (the API answered no, and why) from an
// API that could not be reached.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls a running peerd's admin API.
type Client struct {
	// Base is the API's URL, e.g. "http://127.0.0.1:3180".
	Base string
	// Token is the bearer token for writes ("" sends none).
	Token string
	// HTTP is the client used (nil: one with a 30 s timeout).
	HTTP *http.Client
}

// Refused is an answer of the API other than success: its status and
// the error it gave.
type Refused struct {
	Status int
	Msg    string
}

func (r *Refused) Error() string {
	return fmt.Sprintf("%d %s: %s", r.Status, http.StatusText(r.Status), r.Msg)
}

// Unreachable is an API that did not answer.
type Unreachable struct{ Err error }

func (u *Unreachable) Error() string { return u.Err.Error() }
func (u *Unreachable) Unwrap() error { return u.Err }

// maxAnswer bounds an answer read (the peer list of a large hierarchy,
// a history).
const maxAnswer = 32 << 20

// Do sends method path (with a JSON body when body is not nil) and
// decodes the JSON answer into out (unless nil).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.Base, "/")+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return &Unreachable{err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return &Unreachable{err}
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(raw))
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return &Refused{Status: resp.StatusCode, Msg: msg}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not what peerd sends: %v", method, path, err)
	}
	return nil
}

// Peers is GET /peers, as raw JSON objects (the command line prints what
// it knows of them and passes the rest through with -json).
func (c *Client) Peers(ctx context.Context) ([]json.RawMessage, error) {
	var out struct {
		Peers []json.RawMessage `json:"peers"`
	}
	err := c.Do(ctx, http.MethodGet, "/peers", nil, &out)
	return out.Peers, err
}

// Peer is GET /peers/{name} decoded into out.
func (c *Client) Peer(ctx context.Context, name string, out any) error {
	return c.Do(ctx, http.MethodGet, "/peers/"+url.PathEscape(name), nil, out)
}

// History is GET /peers/{name}/history decoded into out.
func (c *Client) History(ctx context.Context, name string, out any) error {
	return c.Do(ctx, http.MethodGet, "/peers/"+url.PathEscape(name)+"/history", nil, out)
}

// SetState is PUT /peers/{name}/state; ttl "" is none.
func (c *Client) SetState(ctx context.Context, name, state, reason, ttl string, out any) error {
	body := map[string]string{"admin_state": state}
	if reason != "" {
		body["reason"] = reason
	}
	if ttl != "" {
		body["ttl"] = ttl
	}
	return c.Do(ctx, http.MethodPut, "/peers/"+url.PathEscape(name)+"/state", body, out)
}

// Probe is POST /peers/{name}/probe.
func (c *Client) Probe(ctx context.Context, name string, out any) error {
	return c.Do(ctx, http.MethodPost, "/peers/"+url.PathEscape(name)+"/probe", nil, out)
}

// Reload is POST /reload.
func (c *Client) Reload(ctx context.Context, out any) error {
	return c.Do(ctx, http.MethodPost, "/reload", nil, out)
}

// Purge is DELETE /cache?url=.
func (c *Client) Purge(ctx context.Context, rawURL string, out any) error {
	return c.Do(ctx, http.MethodDelete, "/cache?url="+url.QueryEscape(rawURL), nil, out)
}

// Plan is GET /plan with the query's parameters.
func (c *Client) Plan(ctx context.Context, q url.Values, out any) error {
	return c.Do(ctx, http.MethodGet, "/plan?"+q.Encode(), nil, out)
}
