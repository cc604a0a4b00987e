package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
)

// Request fields of /v1/completions and /v1/chat/completions. A field the
// server implements is decoded into the request struct; a field OpenAI or
// vLLM documents that it does not implement is accepted only at a value
// that changes nothing (its default, null, an empty list), and any other
// value is a 400 naming the field; a field neither knows is a 400 too.
// Nothing a client sends is silently ignored.

// noop reports whether a raw value of an unimplemented field changes
// nothing; want says which values those are, for the error.
type noop struct {
	ok   func(raw json.RawMessage) bool
	want string
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(raw, []byte("null")) }

// nullOr accepts null and the JSON values vals (numbers as float64, so
// 1 and 1.0 match and "1" does not).
func nullOr(want string, vals ...any) noop {
	return noop{want: want, ok: func(raw json.RawMessage) bool {
		if isNull(raw) {
			return true
		}
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return false
		}
		for _, w := range vals {
			if i, ok := w.(int); ok {
				w = float64(i)
			}
			if v == w {
				return true
			}
		}
		return false
	}}
}

// nullOrEmpty accepts null, {}, [] and "".
var nullOrEmpty = noop{want: "null or empty", ok: func(raw json.RawMessage) bool {
	switch string(raw) {
	case "null", "{}", "[]", `""`:
		return true
	}
	return false
}}

// anyValue is a field that does not change what is generated (an end-user
// id, request metadata, a prefix-cache salt where no cache is shared).
var anyValue = noop{want: "any", ok: func(json.RawMessage) bool { return true }}

// unimplemented are the OpenAI and vLLM request fields (vLLM's
// entrypoints/openai protocol.py, 2026) this server does not implement,
// with the values that are still honest to accept.
var unimplemented = map[string]noop{
	"frequency_penalty":             nullOr("0", 0),
	"presence_penalty":              nullOr("0", 0),
	"repetition_penalty":            nullOr("1", 1),
	"length_penalty":                nullOr("1", 1),
	"logit_bias":                    nullOrEmpty,
	"best_of":                       nullOr("1", 1),
	"suffix":                        nullOrEmpty,
	"use_beam_search":               nullOr("false", false),
	"min_p":                         nullOr("0", 0),
	"min_tokens":                    nullOr("0", 0),
	"include_stop_str_in_output":    nullOr("false", false),
	"spaces_between_special_tokens": nullOr("true", true),
	"truncate_prompt_tokens":        nullOr("null"),
	"allowed_token_ids":             nullOr("null"),
	"bad_words":                     nullOrEmpty,
	"prompt_embeds":                 nullOr("null"),
	"response_format": {want: `null or {"type":"text"}`, ok: func(raw json.RawMessage) bool {
		var rf map[string]any
		return isNull(raw) || (json.Unmarshal(raw, &rf) == nil && len(rf) == 1 && rf["type"] == "text")
	}},
	"structured_outputs":          nullOr("null"),
	"guided_json":                 nullOr("null"),
	"guided_regex":                nullOr("null"),
	"guided_choice":               nullOr("null"),
	"guided_grammar":              nullOr("null"),
	"guided_decoding_backend":     nullOr("null"),
	"guided_whitespace_pattern":   nullOr("null"),
	"logits_processors":           nullOrEmpty,
	"priority":                    nullOr("0", 0),
	"kv_transfer_params":          nullOr("null"),
	"vllm_xargs":                  nullOrEmpty,
	"max_repetition_pattern_size": nullOr("0", 0),
	"min_repetition_pattern_size": nullOr("0", 0),
	"repetition_min_count":        nullOr("0", 0),
	"store":                       nullOr("false", false),
	"service_tier":                nullOr(`"auto" or "default"`, "auto", "default"),
	"user":                        anyValue,
	"metadata":                    anyValue,
	"request_id":                  anyValue,
	"cache_salt":                  anyValue,
	"echo":                        nullOr("false", false),
	"functions":                   nullOrEmpty, // the deprecated form of tools
	"function_call":               nullOr(`"none"`, "none"),
	"reasoning_effort":            nullOr("null"),
	"include_reasoning":           nullOr("true", true),
	"modalities": {want: `null or ["text"]`, ok: func(raw json.RawMessage) bool {
		return isNull(raw) || string(bytes.ReplaceAll(raw, []byte(" "), nil)) == `["text"]`
	}},
	"audio":                  nullOr("null"),
	"prediction":             nullOr("null"),
	"web_search_options":     nullOr("null"),
	"continue_final_message": nullOr("false", false),
	"documents":              nullOrEmpty,
	"chat_template":          nullOr("null"),
	"mm_processor_kwargs":    nullOrEmpty,
	"media_io_kwargs":        nullOrEmpty,
}

// unimplementedTokenize are /tokenize's fields (vLLM's
// TokenizeChatRequest) not implemented.
var unimplementedTokenize = map[string]noop{
	"continue_final_message": nullOr("false", false),
	"chat_template":          nullOr("null"),
	"mm_processor_kwargs":    nullOrEmpty,
	"media_io_kwargs":        nullOrEmpty,
}

// unimplementedStreamOptions are stream_options fields not implemented.
var unimplementedStreamOptions = map[string]noop{
	"continuous_usage_stats": nullOr("false", false), // vLLM's
}

// Implemented fields, by endpoint.
var (
	commonFields     = []string{"model", "max_tokens", "temperature", "top_p", "top_k", "n", "seed", "stop", "stop_token_ids", "ignore_eos", "stream", "stream_options", "return_token_ids", "return_tokens_as_token_ids", "prompt_logprobs", "skip_special_tokens", "add_special_tokens"}
	completionFields = append(slices.Clone(commonFields), "prompt", "logprobs")
	chatFields       = append(slices.Clone(commonFields), "messages", "logprobs", "top_logprobs", "max_completion_tokens", "add_generation_prompt",
		"tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs")
	tokenizeFields   = []string{"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt", "return_token_strs", "tools", "chat_template_kwargs"}
	detokenizeFields = []string{"model", "tokens"}
)

// checkFields refuses a request that names a field outside known at a
// value that would change the result.
func checkFields(body []byte, known []string, rules map[string]noop) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return badParam("", "the request body must be a JSON object: %v", err)
	}
	// Sorted, so the error names the same field every time.
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if slices.Contains(known, k) {
			continue
		}
		rule, ok := rules[k]
		if !ok {
			return badParam(k, "unknown field %q: this server does not know it (docs/serving.md lists what it implements).", k)
		}
		if !rule.ok(bytes.TrimSpace(fields[k])) {
			return badParam(k, "%s is not supported by this server; only %s is accepted.", k, rule.want)
		}
	}
	return nil
}

// decodeStrict reads a JSON body into v after checkFields, answering the
// errors itself; it reports whether the handler should go on.
func (s *Server) decodeStrict(w http.ResponseWriter, r *http.Request, v any, known []string) bool {
	rules := unimplemented
	if r.URL.Path == "/tokenize" || r.URL.Path == "/detokenize" {
		rules = unimplementedTokenize
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, s.version(), http.StatusRequestEntityTooLarge, "invalid_request_error", "", "request_too_large",
				fmt.Sprintf("Request body exceeds the limit of %d bytes.", tooBig.Limit))
			return false
		}
		writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", "", "invalid_body", "reading the body: "+err.Error())
		return false
	}
	if !json.Valid(body) {
		writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", "", "invalid_json",
			"We could not parse the JSON body of your request: "+json.Unmarshal(body, new(any)).Error())
		return false
	}
	if err := checkFields(body, known, rules); err != nil {
		s.writeParamError(w, err)
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		// A value of the wrong type: name its field.
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			field := jsonField(te.Field)
			s.writeParamError(w, badParam(field, "%s must be %s, not a JSON %s.", field, jsonKind(te.Type.Kind().String()), te.Value))
			return false
		}
		writeError(w, s.version(), http.StatusBadRequest, "invalid_request_error", "", "invalid_json",
			"We could not parse the JSON body of your request: "+err.Error())
		return false
	}
	return true
}

// streamOptions is stream_options: include_usage is implemented;
// vLLM's continuous_usage_stats only at false.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// parseStreaming checks a request's streaming fields together: its
// stream_options, and prompt_logprobs, which a stream cannot carry (as in
// vLLM).
func parseStreaming(raw json.RawMessage, stream bool, promptLogprobs *int) (streamOptions, error) {
	so, err := parseStreamOptions(raw, stream)
	if err == nil && stream && promptLogprobs != nil {
		err = badParam("prompt_logprobs", "prompt_logprobs are not available with stream: true (as in vLLM).")
	}
	return so, err
}

func parseStreamOptions(raw json.RawMessage, stream bool) (streamOptions, error) {
	var so streamOptions
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isNull(raw) {
		return so, nil
	}
	if !stream {
		return so, badParam("stream_options", "stream_options can only be given with stream: true.")
	}
	if err := checkFields(raw, []string{"include_usage"}, unimplementedStreamOptions); err != nil {
		var pe *paramError
		if errors.As(err, &pe) {
			pe.param = "stream_options." + pe.param
		}
		return so, err
	}
	if err := json.Unmarshal(raw, &so); err != nil {
		return so, badParam("stream_options", "stream_options: %v", err)
	}
	return so, nil
}

// jsonKind names a Go kind as JSON calls it, for errors.
func jsonKind(k string) string {
	switch k {
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "ptr":
		return "a value of another type"
	}
	return "a number"
}

// jsonField is a decode error's field path without the names of the Go
// structs the request types embed (sampling, chatInput).
func jsonField(path string) string {
	parts := strings.Split(path, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "sampling" && p != "chatInput" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}
