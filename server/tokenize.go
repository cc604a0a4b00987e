package server

import (
	"encoding/json"
	"net/http"

	"github.com/longhaul-rl/longhaul/tokenizer/bytetok"
)

// ---- /tokenize, /detokenize (vLLM shapes) ----

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model               string        `json:"model"`
		Prompt              *string       `json:"prompt"`
		Messages            []chatMessage `json:"messages"`
		AddSpecialTokens    *bool         `json:"add_special_tokens"`
		AddGenerationPrompt *bool         `json:"add_generation_prompt"`
		ReturnTokenStrs     bool          `json:"return_token_strs"`
	}
	if !s.decode(w, r, &req) {
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		s.writeParamError(w, err)
		return
	}
	if s.be.TokenIDs != nil {
		s.writeParamError(w, errNoTokenizer("prompt"))
		return
	}
	var toks []int32
	switch {
	case req.Prompt != nil && req.Messages != nil:
		s.writeParamError(w, badParam("prompt", "give either prompt or messages, not both."))
		return
	case req.Prompt != nil:
		ps, err := parsePrompt(json.RawMessage(mustJSON(*req.Prompt)), req.AddSpecialTokens == nil || *req.AddSpecialTokens, s.vocabSize(), s.be.TokenIDs)
		if err != nil {
			s.writeParamError(w, err)
			return
		}
		toks = ps[0]
	case req.Messages != nil:
		msgs, err := toMessages(req.Messages)
		if err != nil {
			s.writeParamError(w, err)
			return
		}
		if toks, err = bytetok.Render(msgs, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt); err != nil {
			s.writeParamError(w, badParam("messages", "%s", err.Error()))
			return
		}
	default:
		s.writeParamError(w, badParam("prompt", "prompt or messages is required."))
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
			resp.TokenStrs[i] = tokenString(t, false)
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
	if !s.decode(w, r, &req) {
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		s.writeParamError(w, err)
		return
	}
	if s.be.TokenIDs != nil {
		s.writeParamError(w, errNoTokenizer("tokens"))
		return
	}
	for _, t := range req.Tokens {
		if t < 0 || t >= bytetok.VocabSize {
			s.writeParamError(w, badParam("tokens", "token id %d is out of range [0, %d).", t, bytetok.VocabSize))
			return
		}
	}
	writeJSON(w, s.version(), http.StatusOK, map[string]string{"prompt": bytetok.Decode(req.Tokens)})
}
