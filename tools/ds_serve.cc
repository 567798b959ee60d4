// ds_serve: an OpenAI-compatible HTTP server over the ragged engine (FastGen's continuous batching with a blocked KV
// cache and Dynamic SplitFuse; deepspeed/inference/ragged_engine.h), for a Hugging Face model folder:
//
//   ds_serve --model_dir Llama-3.2-1B --port 8000
//   ds_serve --model_dir DIR --port 8000 --config serving.json   # a RaggedEngineConfig (blocks, batch budget, ...)
//   deepspeed --num_procs 2 ds_serve --model_dir DIR --port 8000 --tp_size 2   # rank 0 serves HTTP
//   curl http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' -d '{"model": "Llama-3.2-1B",
//        "prompt": "The capital of France is", "max_tokens": 16}'
//
// Endpoints: POST /v1/completions and /v1/chat/completions (streamed with "stream": true), GET /v1/models, /health,
// /metrics (src/serving/http_server.h). The folder's tokenizer, generation_config.json (defaults, stop tokens) and
// chat template are used as transformers uses them. SIGINT or SIGTERM stops it: requests in flight are cancelled.
// Exit 1 with one line for a bad folder, config or port.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "deepspeed/arguments.h"
#include "deepspeed/comm.h"
#include "deepspeed/data/tokenizer.h"
#include "deepspeed/error.h"
#include "deepspeed/inference/engine.h"
#include "deepspeed/inference/ragged_engine.h"
#include "deepspeed/serving/chat_template.h"
#include "serving/completion_service.h"
#include "serving/engine_loop.h"
#include "serving/http_server.h"
#include "serving/serving_metrics.h"

namespace {

namespace di = deepspeed::inference;
namespace ds = deepspeed::serving;

struct Options {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string config;
  std::string dtype = "fp32";
  int tp_size = 0;        // 0: the config's
  int64_t max_queue = 0;  // 0: the config's max_tracked_sequences
  std::string served_model_name;
  size_t max_body_bytes = 16u << 20;
  int http_threads = 64;
};

di::RaggedEngineConfig engine_config(const Options& o) {
  di::RaggedEngineConfig c = o.config.empty() ? di::RaggedEngineConfig() : di::RaggedEngineConfig::from_file(o.config);
  if (o.config.empty()) c.dtype = di::InferenceConfig::parse_dtype(o.dtype, "--dtype");
  if (o.tp_size > 0) c.tp_size = o.tp_size;
  return c;
}

// The folder's generation_config.json, else config.json's stop tokens, as ds_generate and transformers take them.
di::GenerationConfig generation_defaults(const std::string& model_dir) {
  std::string file = model_dir + "/generation_config.json";
  if (!std::filesystem::exists(file)) file = model_dir + "/config.json";
  return std::filesystem::exists(file) ? di::GenerationConfig::from_file(file) : di::GenerationConfig();
}

// The chat renderer, or none with the reason chat requests are refused (the folder has no usable template).
ds::ChatRenderer chat_renderer(const std::string& model_dir, std::string* missing) {
  try {
    auto chat = std::make_shared<const ds::ChatTemplate>(ds::ChatTemplate::from_model_dir(model_dir));
    return ds::make_chat_renderer(std::move(chat));
  } catch (const std::exception& e) {
    *missing = std::string("the model has no chat template (") + e.what() + "); use /v1/completions";
    std::fprintf(stderr, "ds_serve: warning: chat requests will be refused: %s\n", e.what());
    return nullptr;
  }
}

// Stops the server on SIGINT or SIGTERM: the requests in flight are cancelled (their handlers answer 503 or end
// their stream with an error event), then the server stops listening. The signals are blocked in every thread (main
// blocks them before any thread starts) and taken here with sigwait, so the stop runs in a normal thread rather
// than a signal handler.
class SignalStopper {
 public:
  SignalStopper(ds::EngineLoop& loop, ds::HttpServer& server)
      : thread_([this, &loop, &server] { wait(loop, server); }) {}
  ~SignalStopper() {
    finished_ = true;
    pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigwait when no signal came
    thread_.join();
  }

 private:
  void wait(ds::EngineLoop& loop, ds::HttpServer& server) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int signal = 0;
    sigwait(&set, &signal);
    // A stop before serve() has started listening is lost: repeat it until serve() has returned.
    while (!finished_) {
      loop.shutdown();
      server.stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

int serve(const Options& o, di::RaggedEngine& engine, int64_t context_length) {
  const auto tokenizer = deepspeed::data::Tokenizer::from_file(o.model_dir);
  ds::ServiceOptions so;
  so.model_name =
      o.served_model_name.empty() ? std::filesystem::path(o.model_dir).filename().string() : o.served_model_name;
  if (so.model_name.empty()) so.model_name = std::filesystem::path(o.model_dir).parent_path().filename().string();
  so.context_length = context_length;
  so.max_in_flight = std::min(o.max_queue > 0 ? o.max_queue : INT64_MAX, engine.config().max_tracked_sequences);
  so.generation = generation_defaults(o.model_dir);
  ds::ChatRenderer chat = chat_renderer(o.model_dir, &so.chat_template_missing);

  ds::EngineLoop loop(engine);
  ds::RequestCounters counters;
  ds::CompletionService service(loop, *tokenizer, std::move(chat), so, counters);
  ds::HttpServer server(
      service, counters, [&] { return ds::prometheus_text(engine.metrics(), loop.tokens_per_second(), counters); },
      [&] { return !loop.failed(); }, {o.host, o.port, o.max_body_bytes, o.http_threads});
  server.bind();
  std::thread stepper([&] { loop.run(); });
  std::fprintf(stderr, "ds_serve: serving %s on http://%s:%d (context %lld tokens)\n", so.model_name.c_str(),
               o.host.c_str(), o.port, static_cast<long long>(context_length));
  {
    SignalStopper stopper(loop, server);
    server.serve();
  }
  loop.stop();
  stepper.join();
  std::fprintf(stderr, "ds_serve: stopped\n");
  return 0;
}

int run(const Options& o) {
  const di::RaggedEngineConfig config = engine_config(o);
  di::InferenceConfig ic;
  ic.dtype = config.dtype;
  ic.tp_size = config.tp_size;
  auto loaded = deepspeed::init_inference(o.model_dir, ic);
  const int64_t context = std::min<int64_t>(config.max_context, loaded.module()->config().max_position_embeddings);
  di::RaggedEngine engine(loaded.module(), config);
  if (deepspeed::comm::is_initialized()) {
    // One server: its tensor-parallel group is the whole job (data-parallel replicas would each bind the port).
    DS_CHECK(deepspeed::comm::get_world_size() == config.tp_size, "ds_serve: the launcher started ",
             deepspeed::comm::get_world_size(), " ranks but tensor_parallel.tp_size is ", config.tp_size,
             "; start exactly tp_size ranks");
  }
  const bool follower = deepspeed::comm::is_initialized() && deepspeed::comm::get_rank() != 0;
  if (follower) {
    // Tensor-parallel ranks other than 0 run rank 0's plans until it stops them. They leave SIGINT and SIGTERM
    // blocked: rank 0 takes the signal, ends the requests and then stop_followers(), which a follower already
    // gone would leave waiting.
    engine.follow();
    return 0;
  }
  const int status = serve(o, engine, context);
  if (config.tp_size > 1) engine.stop_followers();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  deepspeed::strip_launcher_args(argc, argv);  // the launcher's --local_rank
  // Before any thread starts, so that every thread inherits the mask (see SignalStopper); a client that goes away
  // must fail a write, not kill the server.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  Options o;
  CLI::App app{"Serve a Hugging Face model folder over OpenAI's HTTP API (continuous batching, streaming)"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--model_dir", o.model_dir, "Hugging Face folder: config.json, safetensors, tokenizer")->required();
  app.add_option("--port", o.port, "TCP port to listen on")->required()->check(CLI::Range(1, 65535));
  app.add_option("--host", o.host, "address to listen on (127.0.0.1: this machine only)");
  app.add_option("--config", o.config, "the engine's RaggedEngineConfig (JSON): KV blocks, batch budget, dtype");
  app.add_option("--dtype", o.dtype, "fp32, bf16 or fp16 (without --config)");
  app.add_option("--tp_size", o.tp_size, "split the model over this many ranks (start them with the launcher)")
      ->check(deepspeed::check_at_least(1));
  app.add_option("--max_queue", o.max_queue, "requests held at once, at most max_tracked_sequences; more get 429")
      ->check(deepspeed::check_at_least(1));
  app.add_option("--served_model_name", o.served_model_name, "the model's name in the API (default: the folder's)");
  app.add_option("--max_body_bytes", o.max_body_bytes, "larger request bodies get 413");
  app.add_option("--http_threads", o.http_threads, "connections served at once (a stream holds one)")
      ->check(deepspeed::check_at_least(2));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds_serve: error: %s\n", e.what());
    return 1;
  }
}
