// Package credentials owns who may call Tollgate: the tenants' API keys and
// the service tokens of limiters that run outside it, with the in-process
// cache, key index and revocation channel that let Authenticate answer
// without Postgres in steady state. README.md states its rules.
package credentials
