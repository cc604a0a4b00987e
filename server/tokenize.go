package server

import (
	"encoding/json"
	"net/http"
)

// ---- /tokenize, /detokenize (vLLM shapes) ----

// tokenizeRequest is vLLM's TokenizeCompletionRequest (prompt) or
// TokenizeChatRequest (messages, tools, add_generation_prompt, ...).
type tokenizeRequest struct {
	chatInput
	Model           string  `json:"model"`
	Prompt          *string `json:"prompt"`
	ReturnTokenStrs bool    `json:"return_token_strs"`
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if !s.decodeStrict(w, r, &req, tokenizeFields) {
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		s.writeParamError(w, err)
		return
	}
	if s.txt == nil {
		s.writeParamError(w, errNoTokenizer("prompt"))
		return
	}
	var toks []int32
	var err error
	switch {
	case req.Prompt != nil && req.Messages != nil:
		err = badParam("prompt", "give either prompt or messages, not both.")
	case req.Prompt != nil:
		if req.AddGenerationPrompt != nil || req.Tools != nil || req.ChatTemplateKwargs != nil {
			err = badParam("prompt", "add_generation_prompt, tools and chat_template_kwargs go with messages, not prompt.")
			break
		}
		toks = s.txt.encode(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	case req.Messages != nil:
		var tools []json.RawMessage
		if tools, err = s.parseTools(req.Tools); err == nil {
			toks, err = s.render(r.Context(), req.chatInput, tools, true)
		}
	default:
		err = badParam("prompt", "prompt or messages is required.")
	}
	if err != nil {
		s.writeParamError(w, err)
		return
	}
	resp := struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []int32  `json:"tokens"`
		TokenStrs   []string `json:"token_strs"`
	}{Count: len(toks), MaxModelLen: s.be.MaxModelLen, Tokens: nonNil(toks)}
	if req.ReturnTokenStrs {
		resp.TokenStrs = make([]string, len(toks))
		for i, t := range toks {
			resp.TokenStrs[i] = s.txt.tokenPiece(t)
		}
	}
	writeJSON(w, s.version(), http.StatusOK, resp)
}

func mustJSON(s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string  `json:"model"`
		Tokens []int32 `json:"tokens"`
	}
	if !s.decodeStrict(w, r, &req, detokenizeFields) {
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		s.writeParamError(w, err)
		return
	}
	if s.txt == nil {
		s.writeParamError(w, errNoTokenizer("tokens"))
		return
	}
	for _, t := range req.Tokens {
		if t < 0 || int(t) >= s.txt.size() {
			s.writeParamError(w, badParam("tokens", "token id %d is out of range [0, %d).", t, s.txt.size()))
			return
		}
	}
	writeJSON(w, s.version(), http.StatusOK, map[string]string{"prompt": s.txt.Tok.Decode(req.Tokens)})
}
