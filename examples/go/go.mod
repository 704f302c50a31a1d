module parkway.example/triage

go 1.19
