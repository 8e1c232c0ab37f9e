"""The service's configuration: one `Settings` object per process, read from `JUIZ_*` environment variables.

Built where a process starts (`service.app.create_app`, `workers.worker.main`, the CLI), never at import time, and
passed down from there. Every field reads the variable `JUIZ_<FIELD NAME IN CAPITALS>`; its description is the
one-line documentation in the settings reference (scripts/gen_docs.py writes docs/reference/settings.md).

API keys are secret: a `SecretStr`, so `repr()`, `model_dump()` and logs show `**********`; they are only ever
compared in constant time.

pydantic-settings reads the environment; `from_env(env)` may hand it another mapping instead (tests, the benchmark
stack computing what its child processes will read).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from juiz.runtime.errors import InputError

DEFAULT_MODEL = "qwen2.5-coder-1.5b-instruct"  # the development judge (`juiz models pull`, juiz.engines.models)

ENV_PREFIX = "JUIZ_"
MiB = 1 << 20


# The mapping `Settings.from_env(env)` reads instead of os.environ, for the duration of that one call.
_ENVIRONMENT: ContextVar[Mapping[str, str] | None] = ContextVar("juiz_settings_environment", default=None)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source, reading `from_env`'s mapping when one was given."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = _ENVIRONMENT.get()
        if env is None:
            return super()._load_env_vars()
        return {name.lower(): value for name, value in env.items()}  # the source matches names case-insensitively


@contextmanager
def _reading(env: Mapping[str, str] | None) -> Iterator[None]:
    token = _ENVIRONMENT.set(env)
    try:
        yield
    finally:
        _ENVIRONMENT.reset(token)


class Settings(BaseSettings):
    """Everything an API or worker process is configured with. Field `x` is read from `JUIZ_X`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")

    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Redis holding batches, results and the RQ queues.")
    host: str = Field("127.0.0.1", description="Address `juiz serve` listens on (0.0.0.0 in a container).")
    port: int = Field(8000, ge=1, le=65535, description="Port `juiz serve` listens on.")
    api_keys: SecretStr = Field(
        SecretStr(""),
        description="API keys as 'tenant:key,tenant2:key2'; each key is a tenant. 'tenant/name:key' also names the "
        "key's holder, the annotator its labels are recorded under (default: the tenant; a tenant's second unnamed key "
        "'tenant 2'). Empty: the API is open (warned).",
    )
    max_items: int = Field(100_000, ge=1, description="Most items one batch may hold (more: 413).")
    max_body_bytes: int = Field(64 * MiB, ge=1024, description="Largest request body in bytes (more: 413).")
    # Intake bounds (422 naming the item and field, nothing stored). Characters, not tokens: the engine still fails
    # an item alone if it is too long for max_model_len; these keep a 5 MB answer out of Redis and the engine.
    max_question_chars: int = Field(4_000, ge=1, description="Longest question an item may have, in characters.")
    max_answer_chars: int = Field(16_000, ge=1, description="Longest answer an item may have, in characters.")
    max_context_chars: int = Field(
        32_000, ge=1, description="Longest context an item may have, in characters (all segments' text together)."
    )
    max_extra_chars: int = Field(
        16_000, ge=0, description="Most characters of JSON an item's extra (passed-through) fields may take."
    )
    max_segments: int = Field(
        256, ge=1, description="Most context segments one item may have (more: 422); each is a conversation of its own."
    )
    max_batch_conversations: int = Field(
        1_000_000,
        ge=1,
        description="Most engine conversations one batch may make: items x metrics x samples, one per segment for "
        "context_relevance (more: 413).",
    )
    max_json_depth: int = Field(
        32, ge=4, le=1000, description="Deepest nesting of JSON arrays/objects accepted in a request body."
    )
    max_json_values: int = Field(
        2_000_000,
        ge=1000,
        description="Most JSON values (objects, arrays and their elements) a request body may hold, counted on its "
        "text before it is parsed (more: 413): a body of tiny segments is refused before it costs memory.",
    )
    allow_open_api: bool = Field(
        False, description="Let `juiz serve` run without API keys on a non-loopback address (an open API, on purpose)."
    )
    rate_limit_per_minute: int = Field(
        600, ge=0, description="Requests per minute one tenant may make to /v1 (more: 429 with Retry-After); 0: none."
    )
    agreement_threads: int = Field(
        2,
        ge=1,
        description="Most agreement reports one API process computes at once (one per batch at a time).",
    )
    agreement_max_work: int = Field(
        2_000_000,
        ge=1,
        description="Cap on bootstrap resamples x graded items for /agreement; resamples are lowered to fit.",
    )
    chunk_size: int = Field(32, ge=1, description="Items per RQ job; a batch is split into chunks of this size.")
    coalesce_max_items: int = Field(
        256, ge=1, description="Most items a worker grades in one engine call, pulling in other queued chunks."
    )
    gather_s: float = Field(
        0.5,
        ge=0,
        description="How long after a small batch (one chunk) was submitted a worker waits for more chunks to fill its "
        "call (0: never).",
    )
    gather_quiet_s: float = Field(
        0.1,
        ge=0,
        description="Before claiming a fresh batch, a worker waits until no batch was submitted for this long (at most "
        "gather_s), so batches submitted together are shared between workers as one backlog.",
    )
    progress_interval_s: float = Field(
        1.0,
        gt=0,
        description="How often a worker writes its engine call's progress (conversations, tokens) to Redis.",
    )
    grade_timeout_s: float = Field(60.0, gt=0, description="How long POST /v1/grade waits for its result before 202.")
    result_cache: bool = Field(
        True,
        description="Reuse a stored result for the same triple, prompt, sampling and engine (model, dtype or "
        "quantisation, server).",
    )
    result_cache_ttl_s: int = Field(7 * 86400, ge=1, description="How long a cached result is reused.")
    idempotency_ttl_s: int = Field(86400, ge=1, description="How long an Idempotency-Key maps to its batch.")
    retention_s: int = Field(
        30 * 86400, ge=0, description="How long a finished or cancelled batch and its results are kept; 0: forever."
    )
    queue: str = Field("juiz", min_length=1, description="RQ queue for batch chunks.")
    priority_queue: str = Field(
        "juiz-priority", min_length=1, description="RQ queue for POST /v1/grade; workers take it first."
    )
    model: str = Field(DEFAULT_MODEL, min_length=1, description="Judge model: a development model name, folder or id.")
    max_model_len: int = Field(
        8192,
        ge=256,
        description="vllm and llamacpp back ends: the engine's context in tokens (prompt + reply); longer items fail. "
        "llama.cpp allocates it for each slot at start-up.",
    )
    engine: Literal["auto", "vllm", "llamacpp", "openai"] = Field(
        "auto",
        description="Judge back end: vllm (in process), llamacpp (llama.cpp in process, on the model's GGUF), openai "
        "(an OpenAI-compatible server); auto: vllm where a CUDA GPU is present or the CPU has AVX-512, else "
        "llamacpp when the model has a GGUF, else vllm.",
    )
    llamacpp_slots: int = Field(
        0,
        ge=0,
        description="llamacpp back end: sequences computed together, each with its own prompt cache and "
        "JUIZ_MAX_MODEL_LEN tokens of KV cache; 0: one per core.",
    )
    llamacpp_threads: int = Field(0, ge=0, description="llamacpp back end: compute threads; 0: one per core.")
    llamacpp_cache_ram_mib: int = Field(
        2048,
        ge=0,
        description="llamacpp back end: host memory (MiB) keeping prompts a slot swapped out, to be reused later "
        "(the 1.5B judge's KV is ~28 KB a token: a 4.7k-token item ~130 MB); 0: none.",
    )
    llamacpp_batch_tokens: int = Field(
        256,
        ge=0,
        description="llamacpp back end: the most prompt tokens the server computes in one step (llama.cpp's n_batch, "
        "and its n_ubatch when smaller than 512); 0: llama.cpp's default (2,048). A prompt's progress comes once a "
        "step: 256 tokens of the 1.5B judge's prompt took 8-9 s on a 2-core AVX2 CPU, 512 took 16-22 s, at the same "
        "speed.",
    )
    llamacpp_repack: bool = Field(
        False,
        description="llamacpp back end: re-lay the weights out at load for the CPU's interleaved kernels (llama.cpp's "
        "repacking). Off: on a 2-core AVX2 CPU the 1.5B judge's Q4_K_M prompts were computed 1.17x and its replies "
        "written 1.08x faster without it (bench.llamacpp_step --repack).",
    )
    cpu_kv_cache_gib: int = Field(
        2,
        ge=1,
        description="vllm back end on a CPU: its KV cache in GiB (VLLM_CPU_KVCACHE_SPACE, which wins when set). With "
        "the defaults the judge and a check on the test model fit side by side in 24 GB.",
    )
    cpu_step_tokens: int | None = Field(
        None,
        ge=0,
        description="vllm back end on a CPU: the most prompt tokens one engine step computes (vLLM's "
        "max_num_batched_tokens); unset: by the dtype, 1,024 in bf16 and 512 in float32 (a step of ~8 s on 2 cores, "
        "at vLLM's default speed); 0: vLLM's default (4,096 on a CPU). Progress moves once a step.",
    )
    engine_base_url: str = Field(
        "", description="openai back end: the server's base URL, up to /chat/completions (e.g. http://host:8000/v1)."
    )
    engine_api_key: SecretStr = Field(SecretStr(""), description="openai back end: the server's API key, if any.")
    engine_model: str = Field("", description="openai back end: the model name the server serves (empty: JUIZ_MODEL).")
    engine_max_concurrency: int = Field(
        64, ge=1, description="openai back end: most requests in flight at once (the server batches them)."
    )
    engine_structured: Literal["auto", "vllm", "llama.cpp", "none"] = Field(
        "auto",
        description="openai back end: how the reply format is enforced (auto: from the server's GET /models).",
    )
    job_timeout_s: int = Field(
        900, ge=1, description="Longest one chunk job may run (it grades up to coalesce_max_items items in one call)."
    )
    heartbeat_interval_s: float = Field(
        5.0, gt=0, description="How often a busy worker sends its heartbeat (RQ's job/worker TTLs, its busy marker)."
    )
    heartbeat_ttl_s: int = Field(
        20,
        ge=2,
        description="A started job whose worker sent no heartbeat for this long is taken as dead and its chunks are "
        "given back; recovery takes about this plus maintenance_interval_s, whatever the call length.",
    )
    redis_retry_s: float = Field(
        120.0,
        ge=0,
        description="How long a busy worker keeps retrying (with backoff) to store its results while Redis is away.",
    )
    priority_burst: int = Field(
        4,
        ge=1,
        description="Most /v1/grade jobs a worker takes in a row before one batch job, so batches can't starve.",
    )
    shared_result_cache: bool = Field(
        False, description="Share the result cache between tenants (off: each tenant reuses only its own results)."
    )
    retry_backoff_s: str = Field(
        "10,60,300", description="Seconds between retries of a chunk after a transient fault; one retry per entry."
    )
    maintenance_interval_s: int = Field(
        10,
        ge=1,
        description="How often RQ's maintenance runs (finds jobs of dead workers); busy workers run it from their "
        "heartbeat thread too.",
    )
    worker_ttl_s: int = Field(
        25, ge=20, description="RQ worker heartbeat TTL; an idle worker wakes (and can run maintenance) every TTL-15 s."
    )
    sweep_interval_s: float = Field(
        30.0,
        gt=0,
        description="How often (at most, all workers together) the sweeper looks for chunks no job will grade.",
    )
    sweep_grace_s: float = Field(
        60.0,
        ge=0,
        description="A batch not over is checked by the sweeper once it has made no progress for this long.",
    )
    scheduler_interval_s: float = Field(
        5.0, gt=0, description="How often a worker moves due retries from RQ's schedule back to their queue."
    )
    log_level: str = Field("INFO", description="Log level of API and worker processes.")
    retry_after_s: int = Field(
        5, ge=1, description="Retry-After (seconds) on a 503 (Redis unreachable, not ready); a 429 says its window's."
    )
    redis_health_check_s: int = Field(
        10,
        ge=0,
        description="A pooled Redis connection idle this long is checked (PING) before use, so one left stale by a "
        "Redis restart is replaced instead of failing a request; 0: never.",
    )
    metrics_key: SecretStr = Field(
        SecretStr(""),
        description="Bearer key for /metrics and /ready from a non-loopback client; empty: loopback clients only.",
    )
    csrf_secret: SecretStr = Field(
        SecretStr(""),
        description="Secret signing the web page's CSRF tokens; empty: one is created once in Redis and shared by "
        "every API replica.",
    )
    secure_cookies: bool = Field(
        False,
        description="Mark the web page's cookies Secure (sent over https only): set it when the page is served over "
        "https, directly or behind a proxy.",
    )
    trusted_proxies: str = Field(
        "",
        description="Addresses (comma-separated IPs or CIDRs) whose X-Forwarded-For is believed; empty: none, the "
        "peer's address is the client's (rate limits per client, loopback checks).",
    )
    api_key: SecretStr = Field(
        SecretStr(""), description="The key clients (`juiz check --server`) send to a juiz API; not the server's."
    )
    home: str = Field("~/.cache/juiz", description="Where development models are provisioned (`juiz models pull`).")
    # A text, not `bool | None`: every field must survive a round trip through the environment (child processes).
    enforce_eager: Literal["auto", "1", "0"] = Field(
        "auto", description="vllm back end: 1 runs eager (no compiled graphs), 0 compiles; auto: eager on CPU only."
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto",
        description="vllm back end: the dtype the model runs in; auto: the model's own, except float32 on an x86 CPU "
        "without native bf16 instructions (avx512_bf16, amx_bf16), where emulated bf16 runs several times slower.",
    )

    @field_validator("api_keys")
    @classmethod
    def _keys_parse(cls, value: SecretStr) -> SecretStr:
        parse_api_keys(value.get_secret_value())
        return value

    @field_validator("retry_backoff_s")
    @classmethod
    def _backoff_parses(cls, value: str) -> str:
        parse_backoff(value)
        return value

    @model_validator(mode="after")
    def _engine_has_server(self) -> Settings:
        if self.engine == "openai" and not self.engine_base_url:
            raise ValueError("JUIZ_ENGINE=openai needs JUIZ_ENGINE_BASE_URL (e.g. http://127.0.0.1:8000/v1)")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.heartbeat_ttl_s <= self.heartbeat_interval_s:
            raise ValueError(
                f"heartbeat_ttl_s ({self.heartbeat_ttl_s}) must exceed "
                f"heartbeat_interval_s ({self.heartbeat_interval_s})"
            )
        if self.priority_queue == self.queue:
            raise ValueError("priority_queue must differ from queue")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keyword arguments win over the environment; no .env file or secrets directory is read behind the user's back.
        return (init_settings, _MappingEnvSource(settings_cls))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read `JUIZ_*` variables (default: os.environ); keyword overrides win. InputError names a bad variable."""
        try:
            with _reading(env):
                return cls(**overrides)
        except ValidationError as exc:
            error = InputError.from_validation(exc)
            field = (error.field or "").partition(".")[0]
            raise InputError(error.message, source=ENV_PREFIX + field.upper() if field else "settings") from None

    @property
    def tenants_by_key(self) -> dict[str, str]:
        """API key → tenant; empty when the API is open."""
        return parse_api_keys(self.api_keys.get_secret_value())

    @property
    def annotators_by_key(self) -> dict[str, str]:
        """API key → the annotator its labels are recorded under; empty when the API is open."""
        return parse_annotators(self.api_keys.get_secret_value())

    @property
    def retry_intervals(self) -> list[int]:
        return parse_backoff(self.retry_backoff_s)

    @property
    def queues(self) -> list[str]:
        """The queues a worker listens to, in the order it serves them."""
        return [self.priority_queue, self.queue]


def _key_entries(text: str) -> list[tuple[str, str | None, str]]:
    """'tenant[/name]:key,…' → (tenant, name or None, key) per entry. The message never repeats a key."""
    entries: list[tuple[str, str | None, str]] = []
    seen: dict[str, str] = {}
    for position, entry in enumerate((e.strip() for e in text.split(",")), start=1):
        if not entry:
            continue
        owner, sep, key = entry.partition(":")
        tenant, slash, name = owner.partition("/")
        if not sep or not tenant.strip() or not key.strip() or (slash and not name.strip()):
            raise ValueError(f"entry {position} is not 'tenant:key' or 'tenant/name:key'")
        if key.strip() in seen:
            raise ValueError(f"entry {position} repeats a key already given to tenant {seen[key.strip()]!r}")
        seen[key.strip()] = tenant.strip()
        entries.append((tenant.strip(), name.strip() or None, key.strip()))
    return entries


def parse_api_keys(text: str) -> dict[str, str]:
    """'tenant:key,tenant2/name:key2' → {key: tenant}. The message never repeats a key."""
    return {key: tenant for tenant, _, key in _key_entries(text)}


def parse_annotators(text: str) -> dict[str, str]:
    """{key: annotator}: the key's own name, else its tenant (a tenant's second unnamed key 'tenant 2', and so on),
    so two people holding two keys of one team are never one annotator."""
    out: dict[str, str] = {}
    unnamed: dict[str, int] = {}
    entries = _key_entries(text)
    taken = {name for _, name, _ in entries if name}
    for tenant, name, key in entries:
        if name is None:
            unnamed[tenant] = unnamed.get(tenant, 0) + 1
            name = tenant if unnamed[tenant] == 1 else f"{tenant} {unnamed[tenant]}"
            while name in taken:
                name += "'"
        taken.add(name)
        out[key] = name
    return out


def parse_backoff(text: str) -> list[int]:
    try:
        intervals = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError("must be comma-separated whole seconds, e.g. 10,60,300") from None
    if any(i < 0 for i in intervals):
        raise ValueError("intervals must not be negative")
    return intervals


def settings_table() -> str:
    """The environment variables as a markdown table."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.default
        if isinstance(default, SecretStr):
            default = default.get_secret_value()
        shown = "(empty)" if default == "" else f"`{default}`"
        rows.append(f"| `{ENV_PREFIX}{name.upper()}` | {shown} | {field.description} |")
    return "\n".join(rows)
