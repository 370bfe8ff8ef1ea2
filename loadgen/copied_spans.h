#pragma once
// Copied-span prompts (workload.copied_spans): a request's own tokens are a document, a request,
// and the document's first tokens again, as an editing or summarization prompt that ends where
// the reply starts reproducing the document. A model that copies (copy-tiny) continues it, and
// prompt lookup (ngram speculation) drafts what it will copy; random prompts give neither.
#include <cstdint>
#include <vector>

#include "engine/request.h"
#include "loadgen/rng.h"
#include "loadgen/scenario.h"

namespace servelab {

/// Ids of the document that end a copied-span prompt (what the reply is to continue from).
inline constexpr int kCopiedSpanLeadTokens = 4;
/// The shortest document: a shorter own prompt gets random ids instead.
inline constexpr int kCopiedSpanMinDocument = 8;

/// Whether a request carries a copied span: one uniform draw from `stream` (the request's
/// (seed, copied_spans, id) stream) below spec.fraction. False, drawing nothing, when it is off.
bool draws_copied_span(const CopiedSpansSpec& spec, Rng& stream);

/// The n_own ids of a copied-span prompt: document D of min(span_tokens, n_own − 5) ids, then
/// n_own − |D| − 4 request ids, then D's first 4 ids. Ids come from `ids` (the request's token
/// stream), uniform in [2, vocab). Edits: from position 8 on, each position q starts, with
/// probability edit_rate, a copy of the bigram at a uniform earlier position p ≤ q − 3 (drawn from
/// `edits`), then the next position is skipped. Needs n_own >= 13 (throws std::invalid_argument).
std::vector<TokenId> copied_span_prompt(const CopiedSpansSpec& spec, int n_own, int vocab, Rng& ids, Rng& edits);

/// The shortest own prompt a copied span fits in: 4 lead ids, 1 request id, an 8-id document.
inline constexpr int kCopiedSpanMinPrompt = kCopiedSpanMinDocument + 1 + kCopiedSpanLeadTokens;

}  // namespace servelab
