package model

import (
	"encoding/json"
	"strings"
	"testing"
)

// Real config.json files of the family (as published on the Hub).
var realConfigs = map[string]string{
	"Qwen3-0.6B": `{"architectures":["Qwen3ForCausalLM"],"attention_bias":false,"attention_dropout":0.0,"bos_token_id":151643,
"eos_token_id":151645,"head_dim":128,"hidden_act":"silu","hidden_size":1024,"initializer_range":0.02,"intermediate_size":3072,
"max_position_embeddings":40960,"max_window_layers":28,"model_type":"qwen3","num_attention_heads":16,"num_hidden_layers":28,
"num_key_value_heads":8,"rms_norm_eps":1e-06,"rope_scaling":null,"rope_theta":1000000,"sliding_window":null,
"tie_word_embeddings":true,"torch_dtype":"bfloat16","transformers_version":"4.51.0","use_cache":true,"use_sliding_window":false,
"vocab_size":151936}`,
	"Llama-3.2-1B": `{"architectures":["LlamaForCausalLM"],"attention_bias":false,"attention_dropout":0.0,"bos_token_id":128000,
"eos_token_id":[128001,128008,128009],"head_dim":64,"hidden_act":"silu","hidden_size":2048,"initializer_range":0.02,
"intermediate_size":8192,"max_position_embeddings":131072,"mlp_bias":false,"model_type":"llama","num_attention_heads":32,
"num_hidden_layers":16,"num_key_value_heads":8,"pretraining_tp":1,"rms_norm_eps":1e-05,"rope_scaling":{"factor":32.0,
"high_freq_factor":4.0,"low_freq_factor":1.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},"rope_theta":500000.0,
"tie_word_embeddings":true,"torch_dtype":"bfloat16","transformers_version":"4.45.0.dev0","use_cache":true,"vocab_size":128256}`,
	"Qwen2.5-0.5B": `{"architectures":["Qwen2ForCausalLM"],"attention_dropout":0.0,"bos_token_id":151643,"eos_token_id":151643,
"hidden_act":"silu","hidden_size":896,"initializer_range":0.02,"intermediate_size":4864,"max_position_embeddings":32768,
"max_window_layers":24,"model_type":"qwen2","num_attention_heads":14,"num_hidden_layers":24,"num_key_value_heads":2,
"rms_norm_eps":1e-06,"rope_theta":1000000.0,"sliding_window":32768,"tie_word_embeddings":true,"torch_dtype":"bfloat16",
"transformers_version":"4.40.1","use_cache":true,"use_sliding_window":false,"vocab_size":151936}`,
}

func TestRealConfigs(t *testing.T) {
	want := map[string]int{"Qwen3-0.6B": 596049920, "Llama-3.2-1B": 1235814400, "Qwen2.5-0.5B": 494032768}
	for name, js := range realConfigs {
		c, err := ParseConfig([]byte(js))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := c.NumParams(); n != want[name] {
			t.Errorf("%s: %d parameters, want %d (the published count)", name, n, want[name])
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseConfig(out)
		if err != nil || !back.Equal(c) {
			t.Fatalf("%s: saved config does not parse back the same: %v\n%s", name, err, out)
		}
		if name == "Llama-3.2-1B" && !strings.Contains(string(out), "[128001,128008,128009]") {
			t.Errorf("eos list not kept: %s", out)
		}
	}
}
