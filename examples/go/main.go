// Command triage is a Parkway step handler written in Go with the standard library only. It serves the step
// ticket.triage, which asks a person the ticket's priority (the run waits in Parkway, not in this process),
// and its continuation ticket.decide@1, which completes the run with the answer. Every outcome is
// committed exactly once by Parkway, whatever restarts either side goes through.
//
//	go build -o worker . && PARKWAY_URL=http://127.0.0.1:8000 WORKER_TOKEN=pk_... PARKWAY_TARGET=example ./worker
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
)

const (
	triageStep = "ticket.triage"
	decideKey  = "ticket.decide@1"
)

// ticket is the run's payload, kept as the parked step's snapshot.
type ticket struct {
	Ticket int `json:"ticket"`
}

// triage parks a question: who may answer it is the target's business (its grants), not this process's.
func triage(target string) Handler {
	return func(item Item) (Outcome, error) {
		var t ticket
		if err := json.Unmarshal(item.Payload, &t); err != nil {
			return nil, fmt.Errorf("the payload is not {\"ticket\": N}: %w", err)
		}
		return Park(decideKey, t, Question{
			Key:    "priority",
			Prompt: fmt.Sprintf("Priority of ticket %d?", t.Ticket),
			Schema: map[string]any{"enum": []string{"low", "high"}},
			Target: target,
		}), nil
	}
}

// decide completes the run with the answer, once a person gave it.
func decide(item Item) (Outcome, error) {
	var t ticket
	if err := json.Unmarshal(item.Snapshot, &t); err != nil {
		return nil, err
	}
	answer := item.Answers["priority"]
	if answer.Status != "answered" {
		return Fail(fmt.Sprintf("the priority of ticket %d was not given (%s)", t.Ticket, answer.Status)), nil
	}
	var priority string
	if err := json.Unmarshal(answer.Value, &priority); err != nil {
		return nil, err
	}
	return Complete(map[string]any{"ticket": t.Ticket, "priority": priority, "by": answer.AnsweredBy}), nil
}

func main() {
	log.SetFlags(0)
	token := os.Getenv("WORKER_TOKEN")
	if token == "" {
		log.Fatal("WORKER_TOKEN is not set: a worker token (parkway token create --kind worker --name go-triage)")
	}
	host, _ := os.Hostname()
	w := &Worker{
		Client:   &Client{BaseURL: env("PARKWAY_URL", "http://127.0.0.1:8000"), Token: token, HTTP: &http.Client{}},
		Name:     fmt.Sprintf("go-triage-%s-%d", host, os.Getpid()),
		Handlers: map[string]Handler{triageStep: triage(env("PARKWAY_TARGET", "example")), decideKey: decide},
		WaitS:    20,
		LeaseS:   leaseS(),
	}
	log.SetPrefix("parkway worker " + w.Name + ": ")
	stop, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() { <-stop.Done(); cancel() }() // the first signal stops gracefully, a second one kills
	if err := w.Run(stop); err != nil {
		log.Fatal(err)
	}
}

// leaseS is PARKWAY_LEASE_S, the seconds an item is held before Parkway hands it out again (5..600; 30 unset).
func leaseS() float64 {
	s, err := strconv.ParseFloat(env("PARKWAY_LEASE_S", "30"), 64)
	if err != nil || s < 5 || s > 600 {
		log.Fatalf("PARKWAY_LEASE_S=%q: a number of seconds from 5 to 600", os.Getenv("PARKWAY_LEASE_S"))
	}
	return s
}

func env(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}
