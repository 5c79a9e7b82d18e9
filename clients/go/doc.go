// Package holdfast is a client of holdfast's hold API, for a supervisor written in Go: Hold,
// Release, Open, Start, Status and Preflight, each write carrying the holds seed's CallMeta,
// with the seed's error classes as sentinel errors (errors.Is).
//
// Its wire types are generated from the API's OpenAPI document (api/openapi.json in the
// repository) by internal/cmd/gen; a test regenerates them and fails on any difference, so
// a change on the server's side breaks this module's build, not a supervisor's calls.
//
// Every write has a deadline: the context's (or CallMeta.Deadline, if earlier). A call
// without one is ErrInvalid and one past it ErrDeadlinePassed, both before anything is
// sent. A write whose outcome cannot be known is ErrUnknown: read Status once its deadline
// plus the CallBound (Preflight) has passed.
package holdfast

//go:generate go run ./internal/cmd/gen -in ../../api/openapi.json -out types_gen.go
