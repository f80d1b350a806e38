/* Expected outcomes of the recorded-shape cases (tests/data/compat). Each
 * line says what a user of that server must get: the reasoning as
 * thinking, the answer as text, tool calls with their ids and parsed
 * input, the normalized stop reason and usage (input_tokens uncached),
 * and the notices and citations delivered. */
#include "unit/provider/compat.h"

const compat_case_t compat_cases[] = {
    {"mistral_parts", false,
     "thinking[Two plus two is four.]text[The answer is 4.] stop=end_turn usage={\"input_tokens\":12,\"output_tokens\":18} "},
    {"mistral_tools_noindex", false,
     "tool[D681PevKs read_file {\"path\":\"a.txt\"}]tool[x9Qm2BvLp read_file {\"path\":\"b.txt\"}] stop=tool_use usage={\"input_tokens\":80,\"output_tokens\":30} "},
    {"azure_empty_first", false,
     "text[Hello] stop=end_turn usage={\"cache_read_input_tokens\":1024,\"input_tokens\":176,\"output_tokens\":1,\"reasoning_tokens\":0} "},
    {"openrouter_reasoning", false,
     "thinking[I should look it up.]details[{\"format\":\"anthropic-claude-v1\",\"index\":0,\"signature\":\"EqQBCkYIBxgCKkBsig==\",\"text\":\"I should look it up.\",\"type\":\"reasoning.text\"},{\"data\":\"gAAAAABencrypted==\",\"format\":\"anthropic-claude-v1\",\"index\":1,\"type\":\"reasoning.encrypted\"}]tool[toolu_01X read_file {\"path\":\"a.txt\"}] stop=tool_use usage={\"cache_creation_input_tokens\":300,\"cache_read_input_tokens\":1500,\"input_tokens\":200,\"output_tokens\":60,\"reasoning_tokens\":20} "},
    {"vllm_no_finish", false,
     "text[Hi there.] stop=end_turn usage={\"input_tokens\":0,\"output_tokens\":0} notice:stop_inferred;"},
    {"perplexity_citations", false,
     "text[Paris [1][2].] stop=end_turn usage={\"input_tokens\":5,\"output_tokens\":6} cite:0:https://example.com/a:Page A;cite:0:https://example.org/b:Page B;"},
    {"openrouter_annotations", false,
     "text[See [example.com](https://example.com/x).] stop=end_turn usage={\"input_tokens\":0,\"output_tokens\":0} cite:0:https://example.com/x:Example X;"},
    {"deepseek_think_tool", false,
     "thinking[Need the file.]tool[call_00_abc read_file {\"path\":\"a.txt\"}] stop=tool_use usage={\"cache_read_input_tokens\":256,\"input_tokens\":44,\"output_tokens\":40,\"reasoning_tokens\":25} "},
    {"think_tags", true,
     "thinking[a < b, so]text[b is <bigger> <] stop=end_turn usage={\"input_tokens\":0,\"output_tokens\":0} "},
    {"responses_tool", false,
     "thinking[**Reading** the file first.]tool[call_Ab12 read_file {\"path\":\"a.txt\"}] stop=tool_use usage={\"cache_read_input_tokens\":512,\"input_tokens\":388,\"output_tokens\":70,\"reasoning_tokens\":48} ",
     "openai-responses"},
    {"responses_text", false,
     "text[It says alpha.] stop=end_turn usage={\"cache_read_input_tokens\":900,\"input_tokens\":100,\"output_tokens\":5,\"reasoning_tokens\":0} cite:0:https://example.com/alpha:Alpha;",
     "openai-responses"},
};
const size_t compat_ncases = sizeof(compat_cases) / sizeof(compat_cases[0]);
