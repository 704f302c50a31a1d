package main

// The pull loop of Parkway's HTTP worker protocol (docs/worker-protocol.md), with net/http only: long poll a
// lease for what this process serves, heartbeat while a handler runs, complete with its outcome. A stop
// ends the long poll at once; an item already leased is finished and completed first, never half done.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Item is a leased piece of work: a step to start (its payload) or a parked step to resume (its snapshot
// and the answers to its questions, by key).
type Item struct {
	LeaseID  string            `json:"lease_id"`
	Kind     string            `json:"kind"` // "start" or "resume"
	RunID    string            `json:"run_id"`
	StepID   string            `json:"step_id"`
	Attempt  int               `json:"attempt"`
	Key      string            `json:"key"` // the step name, or the continuation's name@version
	Payload  json.RawMessage   `json:"payload"`
	Snapshot json.RawMessage   `json:"snapshot"`
	Answers  map[string]Answer `json:"answers"`
}

// Answer is what became of one interaction of a parked step.
type Answer struct {
	Status     string          `json:"status"` // answered, rejected, expired, canceled, ...
	Value      json.RawMessage `json:"value"`
	AnsweredBy *string         `json:"answered_by"`
}

// Question is an interaction a parked step waits on: a person answers it with a value that fits Schema.
type Question struct {
	Kind      string         `json:"kind"` // always "question"
	Key       string         `json:"key"`
	Prompt    string         `json:"prompt"`
	Schema    map[string]any `json:"schema"`
	Target    string         `json:"target"`
	ExpiresIn float64        `json:"expires_in,omitempty"`
}

// Outcome is what a handler returns, as JSON: park, next, complete or fail.
type Outcome map[string]any

// Park makes the step wait on questions; the continuation (name@version) resumes it with the answers.
func Park(continuation string, snapshot any, questions ...Question) Outcome {
	for i := range questions {
		questions[i].Kind = "question"
	}
	return Outcome{"type": "park", "continuation": continuation, "snapshot": snapshot, "interactions": questions}
}

// Complete ends the run with a result.
func Complete(result any) Outcome { return Outcome{"type": "complete", "result": result} }

// Fail ends the run as failed: the workflow's own verdict.
func Fail(reason string) Outcome { return Outcome{"type": "fail", "error": reason} }

// Handler runs one item; an error it returns completes the item as a Fail (the workflow's verdict).
type Handler func(item Item) (Outcome, error)

// APIError is an answer of the API that is not a success: {"error": code, "detail": text}.
type APIError struct {
	Status     int
	Code       string `json:"error"`
	Detail     string `json:"detail"`
	RetryAfter time.Duration
}

func (e *APIError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Detail) }

// Client calls the worker routes with a worker's (or an admin's) bearer token.
type Client struct {
	BaseURL  string
	Token    string
	HTTP     *http.Client
	RetryFor time.Duration // how long a request is sent again while the API cannot answer it (0: 30 s)
}

// unanswered is a request that got no answer (refused, reset, cut off mid-body): it may be sent again.
type unanswered struct{ error }

// post sends body to path and decodes the answer into answer. A 503 and a request that got no answer are sent
// again, byte for byte (the API's idempotency makes that safe), after the Retry-After the API asked for or a
// bounded backoff, for up to RetryFor; then the last error is returned. Each try has its own timeout.
func (c *Client) post(ctx context.Context, path string, timeout time.Duration, body, answer any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	retryFor := c.RetryFor
	if retryFor == 0 {
		retryFor = 30 * time.Second
	}
	deadline := time.Now().Add(retryFor)
	for backoff := 250 * time.Millisecond; ; backoff = min(backoff*2, 5*time.Second) {
		err := c.send(ctx, path, timeout, data, answer)
		wait, again := retryAfter(err, backoff)
		if !again || ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			return err
		}
		sleep(ctx, wait)
	}
}

// retryAfter says whether a failed request may be sent again as it is (a 503, or no answer), and when.
func retryAfter(err error, backoff time.Duration) (time.Duration, bool) {
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusServiceUnavailable {
		if apiErr.RetryAfter > 0 {
			return apiErr.RetryAfter, true
		}
		return backoff, true
	}
	return backoff, errors.As(err, new(unanswered))
}

func (c *Client) send(ctx context.Context, path string, timeout time.Duration, data []byte, answer any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.BaseURL, "/")+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return unanswered{err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return unanswered{err}
	}
	if resp.StatusCode >= 300 {
		apiErr := &APIError{Status: resp.StatusCode}
		if json.Unmarshal(raw, apiErr) != nil || apiErr.Code == "" {
			apiErr.Code, apiErr.Detail = http.StatusText(resp.StatusCode), string(raw)
		}
		if seconds, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			apiErr.RetryAfter = time.Duration(seconds) * time.Second
		}
		return apiErr
	}
	return json.Unmarshal(raw, answer)
}

func leasePath(item Item, action string) string {
	return "/v1/worker/leases/" + url.PathEscape(item.LeaseID) + "/" + action
}

// Worker serves its Handlers, keyed by step name or continuation name@version, one item at a time.
type Worker struct {
	Client   *Client
	Name     string // how this process shows in GET /v1/workers
	Handlers map[string]Handler
	WaitS    float64 // how long a lease call waits for work, 0..30 s
	LeaseS   float64 // the lease, 5..600 s; a heartbeat every third of it while a handler runs
}

// Run leases and serves items until stop is done, then returns nil once the item in hand (if any) was
// completed; it returns an error only for what retrying cannot cure (a bad token, a refused request).
func (w *Worker) Run(stop context.Context) error {
	serves := make([]string, 0, len(w.Handlers))
	for key := range w.Handlers {
		serves = append(serves, key)
	}
	sort.Strings(serves)
	waitS := 0.0 // the first call comes back at once: from then on the API knows what this process serves
	backoff, advertised := 500*time.Millisecond, false
	for stop.Err() == nil {
		request := map[string]any{"worker": w.Name, "serves": serves, "max": 1, "wait_s": waitS, "lease_s": w.LeaseS}
		var page struct {
			Items []Item `json:"items"`
		}
		err := w.Client.post(stop, "/v1/worker/lease", time.Duration(waitS+15)*time.Second, request, &page)
		if err != nil {
			if stop.Err() != nil {
				break // an item leased in the answer this stop cut off comes back when its lease runs out
			}
			var apiErr *APIError
			if errors.As(err, &apiErr) && (apiErr.Status == 401 || apiErr.Status == 403 || apiErr.Status == 422) {
				return err
			}
			wait := backoff
			if apiErr != nil && apiErr.RetryAfter > 0 {
				wait = apiErr.RetryAfter
			}
			log.Printf("lease failed (%v); again in %v", err, wait)
			sleep(stop, wait)
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		if !advertised {
			log.Printf("serving %s as %s", strings.Join(serves, ", "), w.Name)
			advertised = true
		}
		waitS, backoff = w.WaitS, 500*time.Millisecond
		for _, item := range page.Items {
			w.serve(item) // not cut off by a stop: the item is completed, or left whole to its lease
		}
	}
	log.Printf("stopped")
	return nil
}

// serve runs one item's handler with heartbeats, then completes it unless the lease was lost meanwhile.
func (w *Worker) serve(item Item) {
	held, lose := context.WithCancel(context.Background()) // done once the lease is lost or the item served
	defer lose()
	go w.heartbeat(held, lose, item)
	outcome := w.run(item)
	if outcome == nil || held.Err() != nil {
		return // nothing to send, or another worker or the run's end won: left to its lease
	}
	w.complete(held, item, outcome)
}

// run is the handler's outcome, or a Fail with the error it returned or its panic (the workflow's verdict);
// nil for a key this process does not serve (not the workflow's verdict: the item is left to its lease).
func (w *Worker) run(item Item) (outcome Outcome) {
	defer func() {
		if panicked := recover(); panicked != nil {
			outcome = Fail(fmt.Sprintf("%s panicked: %v", item.Key, panicked))
		}
	}()
	handler, ok := w.Handlers[item.Key]
	if !ok {
		log.Printf("%s of run %s is not served here: left to its lease", item.Key, item.RunID)
		return nil
	}
	outcome, err := handler(item)
	switch {
	case err != nil:
		return Fail(fmt.Sprintf("%s: %v", item.Key, err))
	case outcome == nil:
		return Fail(item.Key + " returned no outcome")
	}
	return outcome
}

func (w *Worker) heartbeat(held context.Context, lose context.CancelFunc, item Item) {
	tick := time.NewTicker(time.Duration(w.LeaseS * float64(time.Second) / 3))
	defer tick.Stop()
	for {
		select {
		case <-held.Done():
			return
		case <-tick.C:
		}
		var extended struct{}
		err := w.Client.post(held, leasePath(item, "heartbeat"), 15*time.Second, map[string]any{"lease_s": w.LeaseS}, &extended)
		var apiErr *APIError
		if errors.As(err, &apiErr) && (apiErr.Status == 409 || apiErr.Status == 410) {
			log.Printf("lease of %s for run %s lost (%v): its outcome will not be sent", item.Key, item.RunID, err)
			lose()
		} else if err != nil && held.Err() == nil {
			log.Printf("heartbeat of %s failed (%v); the next one retries", item.Key, err)
		}
	}
}

// complete sends the outcome (post sends it again while the API cannot answer; the exact retry gets the same
// receipt). Refused — 409/410: another worker or the run's end won; 422: this server cannot commit it now (a
// park on a version mid-rollout, on an older server) — or never answered, the item is left to its lease:
// Parkway re-drives it, one attempt per lease, never turned into a Fail of the workflow.
func (w *Worker) complete(held context.Context, item Item, outcome Outcome) {
	var receipt struct {
		RunStatus string `json:"run_status"`
	}
	err := w.Client.post(held, leasePath(item, "complete"), 15*time.Second, map[string]any{"outcome": outcome}, &receipt)
	var apiErr *APIError
	switch {
	case err == nil:
		log.Printf("%s of run %s: %s, run %s", item.Key, item.RunID, outcome["type"], receipt.RunStatus)
	case errors.As(err, &apiErr) && (apiErr.Status == 409 || apiErr.Status == 410):
		log.Printf("completion of %s for run %s refused (%v): another worker or the run's end won", item.Key, item.RunID, err)
	default:
		log.Printf("completion of %s for run %s not committed (%v): left to its lease", item.Key, item.RunID, err)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

func min(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}
