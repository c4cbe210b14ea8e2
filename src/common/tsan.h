// Happens-before annotations for ThreadSanitizer, for hand-offs whose synchronization happens
// inside a library TSan cannot see: Debian's gRPC and abseil are not built with -fsanitize=thread,
// so their locks and atomics are invisible to it, and memory our thread fills before starting a
// gRPC operation and reads again in that operation's callback on a gRPC thread looks unordered.
//
//   tsan::Release(p)  on the thread handing p (and everything it wrote before) to the library,
//                     right before the call that starts the operation (StartCall, StartRead,
//                     StartWrite, Finish, stub->async()->Method);
//   tsan::Acquire(p)  first thing in the callback the library runs for that operation.
//
// The pair states exactly what gRPC guarantees (the callback runs after the start call) and no
// more, so a real race on either side stays reported. The names are TSan's own interface
// (sanitizer/tsan_interface.h: __tsan_acquire, __tsan_release); both are no-ops in builds
// without TSan.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define TANDEM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TANDEM_TSAN 1
#endif
#endif

#ifdef TANDEM_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace tandem::tsan {

inline void Release(const void* p) {
#ifdef TANDEM_TSAN
  __tsan_release(const_cast<void*>(p));
#else
  (void)p;
#endif
}

inline void Acquire(const void* p) {
#ifdef TANDEM_TSAN
  __tsan_acquire(const_cast<void*>(p));
#else
  (void)p;
#endif
}

// Acquire(p) now, Release(p) when the scope ends: a callback that both takes over what the start
// call released and hands what it did on to whoever the library runs next for p.
class Handoff {
 public:
  explicit Handoff(const void* p) : p_(p) { Acquire(p); }
  ~Handoff() { Release(p_); }
  Handoff(const Handoff&) = delete;
  Handoff& operator=(const Handoff&) = delete;

 private:
  const void* p_;
};

}  // namespace tandem::tsan
