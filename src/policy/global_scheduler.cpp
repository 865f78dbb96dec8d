#include "conductor/policy/global_scheduler.hpp"

#include "conductor/util/error.hpp"

namespace conductor::policy {

namespace {

class StaticScheduler final : public GlobalScheduler {
 public:
  explicit StaticScheduler(sched::Schedule schedule) : schedule_(std::move(schedule)) {}
  const char* name() const override { return "static"; }
  sched::Schedule initial_order() override { return schedule_; }
  sched::Schedule next_order(const StepObservation&) override { return schedule_; }

 private:
  sched::Schedule schedule_;
};

}  // namespace

std::unique_ptr<GlobalScheduler> make_global_scheduler(const config::Deck& deck, const sched::Schedule& generated) {
  if (deck.scheduler.kind == "static") return std::make_unique<StaticScheduler>(generated);
  throw InputError("scheduler.kind = '" + deck.scheduler.kind + "' is not available (allowed: static)");
}

}  // namespace conductor::policy
