// RemoteEngineClient's Submit, and the requests that wait for a live worker
// (RemoteEngineClientOptions::wait_for_worker): parked here, sent on by the waiter thread once a
// Health poll finds a worker live, or ended when their wait is over.
#include <algorithm>

#include <fmt/ranges.h>

#include "common/logging.h"
#include "rpc/remote_engine_client_impl.h"

namespace tandem::runtime {

std::string RemoteEngineClient::Impl::NoWorkerMessage() const {
  return fmt::format("no worker available: no live '{}' worker in namespace '{}'{}",
                     fmt::join(options.components, "' or '"), options.namespace_name,
                     options.served_model_name.empty()
                         ? std::string()
                         : fmt::format(" serving model '{}'", options.served_model_name));
}

Status RemoteEngineClient::Impl::TrySubmit(const GenerateRequest& request, OutputCallback& on_output,
                                           SteadyClock::time_point deadline, bool* no_worker) {
  *no_worker = false;
  std::shared_ptr<Worker> worker;
  auto entry = std::make_shared<CallEntry>();
  if (options.selector) worker = Select(request);  // null: round-robin below
  {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < workers.size() && !worker; ++i) {
      const auto& w = workers[(next + i) % workers.size()];
      if (w->healthy) {
        worker = w;
        next = (next + i + 1) % workers.size();
      }
    }
    if (!worker) {
      *no_worker = true;
      return Status(StatusCode::kFailedPrecondition, NoWorkerMessage());
    }
    if (!calls.emplace(request.request_id, entry).second) {
      // (A selector's prediction under this id belongs to the call in flight: not freed here.)
      return Err(StatusCode::kInvalidArgument, "duplicate request id '{}'", request.request_id);
    }
    ++num_active;
  }
  remote_detail::StartGenerateCall(this, std::move(worker), std::move(entry), request, std::move(on_output),
                                   deadline);
  return Status::Ok();
}

Status RemoteEngineClient::Impl::Submit(GenerateRequest request, OutputCallback on_output) {
  const auto now = SteadyClock::now();
  const auto deadline = now + options.request_timeout;
  bool no_worker = false;
  Status st = TrySubmit(request, on_output, deadline, &no_worker);
  if (!no_worker || options.wait_for_worker <= std::chrono::milliseconds(0)) return st;
  auto p = std::make_shared<Parked>();
  p->since = now;
  p->deadline = deadline;
  p->until = std::min(deadline, now + options.wait_for_worker);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (calls.count(request.request_id) ||
        std::any_of(parked.begin(), parked.end(),
                    [&](const auto& q) { return q->request.request_id == request.request_id; })) {
      return Err(StatusCode::kInvalidArgument, "duplicate request id '{}'", request.request_id);
    }
    p->request = std::move(request);
    p->on_output = std::move(on_output);
    parked.push_back(std::move(p));
    num_parked = static_cast<int>(parked.size());
    WakeWaiter();
  }
  {
    std::lock_guard<std::mutex> lock(refresh_mu);  // look again now, and often while it waits
    refresh_now = true;
  }
  refresh_cv.notify_all();
  return Status::Ok();
}

void RemoteEngineClient::Impl::RunWaiter() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    if (parked.empty()) {
      parked_cv.wait(lock, [&] { return waiter_stop || !parked.empty(); });
    } else {
      auto until = parked.front()->until;
      for (const auto& p : parked) until = std::min(until, p->until);
      parked_cv.wait_until(lock, until, [&] { return waiter_stop || parked_dirty; });
    }
    parked_dirty = false;
    const auto now = SteadyClock::now();
    const bool live = std::any_of(workers.begin(), workers.end(), [](const auto& w) { return w->healthy; });
    std::vector<std::shared_ptr<Parked>> go, aborted, expired;
    for (auto& p : parked) {
      auto* to = waiter_stop || p->cancelled ? &aborted : now >= p->until ? &expired : live ? &go : nullptr;
      if (to) to->push_back(std::move(p));
    }
    std::erase_if(parked, [](const auto& p) { return p == nullptr; });
    num_parked = static_cast<int>(parked.size());
    dispatching = go;
    const bool stop = waiter_stop;
    lock.unlock();
    for (auto& p : aborted) {
      RequestOutput out;
      out.request_id = p->request.request_id;
      out.finished = true;
      out.finish_reason = FinishReason::kAbort;
      p->on_output(std::move(out));
    }
    for (auto& p : expired) {
      RequestOutput out;
      out.request_id = p->request.request_id;
      out.finished = true;
      out.finish_reason = FinishReason::kError;
      out.refusal = Err(StatusCode::kFailedPrecondition, "{} (waited {:.1f} s for one)", NoWorkerMessage(),
                        std::chrono::duration<double>(now - p->since).count());
      out.error = out.refusal.message();
      log::warn("[{}] {}", out.request_id, out.error);
      p->on_output(std::move(out));
    }
    std::vector<std::shared_ptr<Parked>> again;  // the worker went away meanwhile
    std::vector<std::shared_ptr<Parked>> sent;
    for (auto& p : go) {
      bool no_worker = false;
      Status st = TrySubmit(p->request, p->on_output, p->deadline, &no_worker);
      if (no_worker) {
        again.push_back(std::move(p));
      } else if (!st.ok()) {
        RequestOutput out;
        out.request_id = p->request.request_id;
        out.finished = true;
        out.finish_reason = FinishReason::kError;
        out.refusal = st;
        out.error = st.message();
        p->on_output(std::move(out));
      } else {
        log::info("[{}] sent to a worker after waiting {:.2f} s for one", p->request.request_id,
                  std::chrono::duration<double>(SteadyClock::now() - p->since).count());
        sent.push_back(std::move(p));
      }
    }
    lock.lock();
    dispatching.clear();
    std::vector<std::shared_ptr<CallEntry>> cancel;  // Cancel came while it was being sent
    for (auto& p : again) parked.push_back(std::move(p));
    for (const auto& p : sent) {
      auto it = calls.find(p->request.request_id);
      if (p->cancelled && it != calls.end()) cancel.push_back(it->second);
    }
    num_parked = static_cast<int>(parked.size());
    if (!cancel.empty()) {
      lock.unlock();
      for (const auto& e : cancel) {
        e->cancelled = true;
        e->context->TryCancel();
      }
      lock.lock();
    }
    if (stop && parked.empty()) return;
  }
}

}  // namespace tandem::runtime
