// HttpServer (http_server.h): cpp-httplib's Server wired to CompletionService.
#include "serving/http_server.h"

#include <httplib.h>

#include <exception>
#include <utility>

#include "serving/openai_response.h"

namespace deepspeed::serving {
namespace {

constexpr const char* kJson = "application/json";

void send_error(httplib::Response& res, const RequestError& e) {
  res.status = e.status();
  res.set_content(error_json(e), kJson);
}

// What httplib answers on its own (no route, body too large, a request it cannot parse), in OpenAI's shape.
httplib::Server::HandlerResponse library_error(const httplib::Request& req, httplib::Response& res,
                                               size_t max_body_bytes) {
  if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
  std::string message;
  if (res.status == 404) {
    message = "no route " + req.method + " " + detail::printable(req.path) +
              " (served: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, /health, /metrics)";
  } else if (res.status == 413) {
    message = "the request body is over " + std::to_string(max_body_bytes) + " bytes (ds_serve --max_body_bytes)";
  } else {
    message = "the HTTP request could not be read (status " + std::to_string(res.status) + ")";
  }
  send_error(res, RequestError(res.status, message));
  return httplib::Server::HandlerResponse::Handled;
}

}  // namespace

struct HttpServer::Impl {
  CompletionService& service;
  RequestCounters& counters;
  std::function<std::string()> metrics_text;
  std::function<bool()> healthy;
  HttpOptions options;
  httplib::Server server;

  void completion(bool chat, const httplib::Request& req, httplib::Response& res);
  void routes();
};

void HttpServer::Impl::completion(bool chat, const httplib::Request& req, httplib::Response& res) {
  const char* endpoint = chat ? "chat/completions" : "completions";
  try {
    std::unique_ptr<ActiveRequest> request = service.start(chat, req.body);
    res.status = 200;
    if (!request->stream()) {
      res.set_content(service.complete(*request), kJson);
    } else {
      // The provider runs after this handler returns, on the same thread; the request lives as long as it does.
      std::shared_ptr<ActiveRequest> shared(std::move(request));
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider("text/event-stream", [this, shared](size_t, httplib::DataSink& sink) {
        const bool ok =
            service.stream(*shared, [&sink](const std::string& s) { return sink.write(s.data(), s.size()); });
        if (ok) sink.done();
        return ok;
      });
    }
  } catch (const RequestError& e) {
    send_error(res, e);
  }
  counters.count(endpoint, res.status);
}

void HttpServer::Impl::routes() {
  server.Post("/v1/completions",
              [this](const httplib::Request& req, httplib::Response& res) { completion(false, req, res); });
  server.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { completion(true, req, res); });
  server.Get("/v1/models",
             [this](const httplib::Request&, httplib::Response& res) { res.set_content(service.models(), kJson); });
  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool ok = healthy();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "{\"status\": \"ok\"}" : "{\"status\": \"engine failed\"}", kJson);
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  const size_t max_body = options.max_body_bytes;
  // httplib checks the body limit against Content-Length only, and would read a chunked body of any size into
  // memory: such a body is refused before it is read (OpenAI's clients always send Content-Length).
  server.set_pre_routing_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Transfer-Encoding").find("chunked") == std::string::npos) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(res, RequestError(411, "chunked request bodies are not accepted: send Content-Length (at most " +
                                          std::to_string(max_body) + " bytes)"));
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  });
  server.set_error_handler(httplib::Server::HandlerWithResponse(
      [max_body](const httplib::Request& req, httplib::Response& res) { return library_error(req, res, max_body); }));
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, RequestError(500, "internal error: " + detail::printable(what), "", "server_error"));
  });
}

HttpServer::HttpServer(CompletionService& service, RequestCounters& counters, std::function<std::string()> metrics_text,
                       std::function<bool()> healthy, HttpOptions options)
    : impl_(new Impl{service, counters, std::move(metrics_text), std::move(healthy), std::move(options), {}}) {
  const int threads = impl_->options.threads;
  impl_->server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  impl_->server.set_payload_max_length(impl_->options.max_body_bytes);
  // An idle keep-alive connection holds its pool thread, and stop() waits for it this long: short, so that a stop
  // (the launcher allows 5 s after SIGTERM) is prompt.
  impl_->server.set_keep_alive_timeout(2);
  impl_->routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  DS_CHECK_T(ConfigError, impl_->server.bind_to_port(impl_->options.host, impl_->options.port),
             "ds_serve: cannot listen on ", impl_->options.host, ":", impl_->options.port,
             " (is the port in use, or the host not an address of this machine?)");
}

void HttpServer::serve() { impl_->server.listen_after_bind(); }

void HttpServer::stop() { impl_->server.stop(); }

}  // namespace deepspeed::serving
