#include "rpc/event_plane_factory.h"

#include "rpc/embedded_event_plane.h"
#ifdef TANDEM_HAVE_NATS
#include "events/nats_event_plane.h"
#endif

namespace tandem::runtime {

Result<std::unique_ptr<EventPlane>> MakeEventPlane(EventPlaneOptions options) {
  TANDEM_RETURN_IF_ERROR(ValidateEventPlaneUrl(options.url));
#ifdef TANDEM_HAVE_NATS
  if (options.url.rfind("nats://", 0) == 0) return MakeNatsEventPlane(std::move(options));
#endif
  return MakeEmbeddedEventPlane(std::move(options));
}

}  // namespace tandem::runtime
