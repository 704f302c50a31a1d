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

// Handler runs one item; an error it returns completes the item as a Fail.
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
	BaseURL string
	Token   string
	HTTP    *http.Client
}

func (c *Client) post(ctx context.Context, path string, timeout time.Duration, body, answer any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.BaseURL, "/")+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
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
	if held.Err() != nil {
		return // another worker or the run's end won: this outcome is not sent
	}
	w.complete(held, item, outcome)
}

func (w *Worker) run(item Item) (outcome Outcome) {
	defer func() {
		if panicked := recover(); panicked != nil {
			outcome = Fail(fmt.Sprintf("%s panicked: %v", item.Key, panicked))
		}
	}()
	handler, ok := w.Handlers[item.Key]
	if !ok {
		return Fail("this worker does not serve " + item.Key)
	}
	outcome, err := handler(item)
	if err != nil {
		return Fail(fmt.Sprintf("%s: %v", item.Key, err))
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

// complete sends the outcome, retrying what may not have arrived (the exact retry gets the same receipt),
// for at most one lease: past it the API re-drives the item anyway. A 422 (an outcome the API cannot
// commit) completes as a Fail with the API's reason, so the run does not come back forever.
func (w *Worker) complete(held context.Context, item Item, outcome Outcome) {
	held, cancel := context.WithTimeout(held, time.Duration(w.LeaseS*float64(time.Second)))
	defer cancel()
	backoff := 250 * time.Millisecond
	for {
		var receipt struct {
			RunStatus string `json:"run_status"`
		}
		err := w.Client.post(held, leasePath(item, "complete"), 15*time.Second, map[string]any{"outcome": outcome}, &receipt)
		if err == nil {
			log.Printf("%s of run %s: %s, run %s", item.Key, item.RunID, outcome["type"], receipt.RunStatus)
			return
		}
		var apiErr *APIError
		errors.As(err, &apiErr)
		switch {
		case apiErr == nil || apiErr.Status >= 500: // it may not have arrived: sent again below
		case apiErr.Status == 409 || apiErr.Status == 410:
			log.Printf("completion of %s for run %s refused (%v): another worker or the run's end won", item.Key, item.RunID, err)
			return
		case apiErr.Status == 422 && outcome["type"] != "fail":
			outcome = Fail(fmt.Sprintf("%s returned an outcome the API refused: %s", item.Key, apiErr.Detail))
			continue
		default:
			log.Printf("completion of %s for run %s failed (%v): left to its lease", item.Key, item.RunID, err)
			return
		}
		if held.Err() != nil {
			log.Printf("completion of %s for run %s not sent (%v): left to its lease", item.Key, item.RunID, err)
			return
		}
		sleep(held, backoff)
		backoff = min(backoff*2, 5*time.Second)
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
