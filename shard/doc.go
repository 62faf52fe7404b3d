// Package shard is the one place that decides which tokenizer worker owns a
// request (request ids) and which data-parallel rank serves it (dispatch
// policies over a load table plus a ledger of dispatches the ranks have not
// yet acknowledged, so a burst between two load reports stays balanced). The
// cache_aware policy also keeps a bounded record of which prompt prefixes went
// to which rank (prefix.go), to send a prompt where its prefix is likely cached.
//
// Ownership is carried explicitly as an Owner index on every wire message, so
// nothing here parses request ids; a client-supplied rid works as well as one
// from NewRID.
package shard
