/* cli_models — `mesh-llm download REF`, `mesh-llm models list|search|installed|rm`, and the
 * download of --model references (catalog names, hf://, ORG/REPO:QUANT, URLs) before a node
 * starts serving. */
#ifndef MESH_CLI_MODELS_H
#define MESH_CLI_MODELS_H

/* argv[1] is "download" or "models": run it and return the exit code; otherwise -1. */
int cli_models_main(int argc, char **argv);
/* Replace every --model REF that needs a download by the downloaded file's path (progress on
 * stderr). Returns 0, or an exit code (1: a download failed, 130: interrupted). */
int cli_models_fetch_args(int argc, char **argv);

#endif
