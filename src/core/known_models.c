/* known_models — the curated catalog shipped in the binary: well-known GGUFs on the Hugging Face
 * hub. Sizes are approximate (the download checks the exact size the server announces). The
 * sha256 fields are empty: no hash is written here that was not checked by hand; the downloader
 * takes the file's sha256 from the hub's LFS metadata (X-Linked-ETag) at download time and
 * verifies the bytes against it before the file is renamed into place. */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "model_ref.h"

#define GB 1000000000ull
#define MB 1000000ull

const known_model_t known_models[] = {
    {"Qwen2.5-0.5B-Instruct-Q4_K_M", "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
     "qwen2.5-0.5b-instruct-q4_k_m.gguf", 491 * MB, "", KNOWN_LLM, 32768, NULL, 1 * GB,
     "Qwen2.5 0.5B instruct: the smallest useful chat model (default)", NULL},
    {"Qwen2.5-1.5B-Instruct-Q4_K_M", "Qwen/Qwen2.5-1.5B-Instruct-GGUF",
     "qwen2.5-1.5b-instruct-q4_k_m.gguf", 1117 * MB, "", KNOWN_LLM, 32768,
     "Qwen2.5-0.5B-Instruct-Q4_K_M", 2 * GB, "Qwen2.5 1.5B instruct chat model", NULL},
    {"Qwen2.5-7B-Instruct-Q4_K_M", "Qwen/Qwen2.5-7B-Instruct-GGUF",
     "qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf", 4683 * MB, "", KNOWN_LLM, 32768,
     "Qwen2.5-0.5B-Instruct-Q4_K_M", 6 * GB, "Qwen2.5 7B instruct chat model (split GGUF, 2 parts)",
     NULL},
    {"Llama-3.2-1B-Instruct-Q4_K_M", "bartowski/Llama-3.2-1B-Instruct-GGUF",
     "Llama-3.2-1B-Instruct-Q4_K_M.gguf", 808 * MB, "", KNOWN_LLM, 131072, NULL, 1500 * MB,
     "Meta Llama 3.2 1B instruct chat model", NULL},
    {"Llama-3.2-3B-Instruct-Q4_K_M", "bartowski/Llama-3.2-3B-Instruct-GGUF",
     "Llama-3.2-3B-Instruct-Q4_K_M.gguf", 2019 * MB, "", KNOWN_LLM, 131072,
     "Llama-3.2-1B-Instruct-Q4_K_M", 3 * GB, "Meta Llama 3.2 3B instruct chat model", NULL},
    {"SmolLM2-360M-Instruct-Q4_K_M", "bartowski/SmolLM2-360M-Instruct-GGUF",
     "SmolLM2-360M-Instruct-Q4_K_M.gguf", 271 * MB, "", KNOWN_LLM, 8192, NULL, 600 * MB,
     "SmolLM2 360M instruct: tiny chat model", NULL},
    {"SmolLM2-1.7B-Instruct-Q4_K_M", "bartowski/SmolLM2-1.7B-Instruct-GGUF",
     "SmolLM2-1.7B-Instruct-Q4_K_M.gguf", 1056 * MB, "", KNOWN_LLM, 8192,
     "SmolLM2-360M-Instruct-Q4_K_M", 2 * GB, "SmolLM2 1.7B instruct chat model", NULL},
    {"SmolVLM-256M-Instruct-Q8_0", "ggml-org/SmolVLM-256M-Instruct-GGUF",
     "SmolVLM-256M-Instruct-Q8_0.gguf", 175 * MB, "", KNOWN_LLM, 8192, NULL, 700 * MB,
     "SmolVLM 256M instruct: tiny vision chat model (reads images; its projector comes with it)",
     "mmproj-SmolVLM-256M-Instruct-Q8_0.gguf"},
    {"nomic-embed-text-v1.5-Q4_K_M", "nomic-ai/nomic-embed-text-v1.5-GGUF",
     "nomic-embed-text-v1.5.Q4_K_M.gguf", 84 * MB, "", KNOWN_EMBEDDING, 2048, NULL, 300 * MB,
     "nomic-embed-text v1.5 text embeddings", NULL},
    {"bge-small-en-v1.5-f16", "CompendiumLabs/bge-small-en-v1.5-gguf", "bge-small-en-v1.5-f16.gguf",
     67 * MB, "", KNOWN_EMBEDDING, 512, NULL, 200 * MB, "BAAI bge-small-en v1.5 embeddings", NULL},
    {"bge-reranker-v2-m3-Q4_K_M", "gpustack/bge-reranker-v2-m3-GGUF",
     "bge-reranker-v2-m3-Q4_K_M.gguf", 438 * MB, "", KNOWN_RERANKING, 8192, NULL, 1 * GB,
     "BAAI bge-reranker v2 m3 (multilingual reranking)", NULL},
};
const size_t known_models_n = sizeof known_models / sizeof known_models[0];

const known_model_t *known_model_default(void)
{
    return &known_models[0];
}

const known_model_t *known_model_find(const char *name)
{
    for (size_t i = 0; i < known_models_n; i++)
        if (strcasecmp(known_models[i].name, name) == 0) return &known_models[i];
    return NULL;
}

bool known_model_matches(const known_model_t *m, const char *text)
{
    if (m->mmproj && (strcasecmp(text, "vision") == 0 || strcasecmp(text, "mmproj") == 0))
        return true;
    return strcasestr(m->name, text) || strcasestr(m->repo, text) || strcasestr(m->file, text) ||
           strcasestr(m->description, text);
}

const char *known_type_name(known_type_t t)
{
    return t == KNOWN_EMBEDDING ? "embedding" : t == KNOWN_RERANKING ? "reranking" : "llm";
}
