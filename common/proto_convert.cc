#include "common/proto_convert.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace kvstore {

void KeyToProto(const Key& key, proto::Key* out) {
  if (key.is_int()) {
    out->set_int_key(key.int_key());
  } else {
    out->set_str_key(key.str_key());
  }
}

absl::StatusOr<Key> KeyFromProto(const proto::Key& key) {
  switch (key.kind_case()) {
    case proto::Key::kIntKey:
      return Key(key.int_key());
    case proto::Key::kStrKey:
      return Key(key.str_key());
    default:
      return absl::InvalidArgumentError("a tensor header has no key");
  }
}

proto::DType DTypeToProto(DType dtype) { return static_cast<proto::DType>(dtype); }

absl::StatusOr<DType> DTypeFromProto(int dtype) { return DTypeFromInt(dtype); }

namespace {

// The optional hyper-parameters, as (C++ field, proto has/get/set) triples.
template <typename Fn>
void ForEachOptional(OptimizerConfig* c, Fn fn) {
  fn(&c->momentum, &proto::OptimizerConfig::has_momentum, &proto::OptimizerConfig::momentum,
     &proto::OptimizerConfig::set_momentum);
  fn(&c->beta1, &proto::OptimizerConfig::has_beta1, &proto::OptimizerConfig::beta1,
     &proto::OptimizerConfig::set_beta1);
  fn(&c->beta2, &proto::OptimizerConfig::has_beta2, &proto::OptimizerConfig::beta2,
     &proto::OptimizerConfig::set_beta2);
  fn(&c->epsilon, &proto::OptimizerConfig::has_epsilon, &proto::OptimizerConfig::epsilon,
     &proto::OptimizerConfig::set_epsilon);
  fn(&c->rho, &proto::OptimizerConfig::has_rho, &proto::OptimizerConfig::rho,
     &proto::OptimizerConfig::set_rho);
  fn(&c->clip_weights, &proto::OptimizerConfig::has_clip_weights,
     &proto::OptimizerConfig::clip_weights, &proto::OptimizerConfig::set_clip_weights);
  fn(&c->schedule_decay, &proto::OptimizerConfig::has_schedule_decay,
     &proto::OptimizerConfig::schedule_decay, &proto::OptimizerConfig::set_schedule_decay);
  fn(&c->lamda1, &proto::OptimizerConfig::has_lamda1, &proto::OptimizerConfig::lamda1,
     &proto::OptimizerConfig::set_lamda1);
  fn(&c->beta, &proto::OptimizerConfig::has_beta, &proto::OptimizerConfig::beta,
     &proto::OptimizerConfig::set_beta);
  fn(&c->wd_lh, &proto::OptimizerConfig::has_wd_lh, &proto::OptimizerConfig::wd_lh,
     &proto::OptimizerConfig::set_wd_lh);
  fn(&c->eta, &proto::OptimizerConfig::has_eta, &proto::OptimizerConfig::eta,
     &proto::OptimizerConfig::set_eta);
  fn(&c->lower_bound, &proto::OptimizerConfig::has_lower_bound,
     &proto::OptimizerConfig::lower_bound, &proto::OptimizerConfig::set_lower_bound);
  fn(&c->upper_bound, &proto::OptimizerConfig::has_upper_bound,
     &proto::OptimizerConfig::upper_bound, &proto::OptimizerConfig::set_upper_bound);
}

}  // namespace

void OptimizerConfigToProto(const OptimizerConfig& config, proto::OptimizerConfig* out) {
  OptimizerConfig c = config;
  out->set_name(c.name);
  if (c.learning_rate) out->set_learning_rate(*c.learning_rate);
  out->set_wd(c.wd);
  out->set_rescale_grad(c.rescale_grad);
  out->set_clip_gradient(c.clip_gradient);
  ForEachOptional(&c, [&](std::optional<double>* field, auto, auto, auto set) {
    if (field->has_value()) (out->*set)(**field);
  });
  if (c.centered) out->set_centered(*c.centered);
  if (c.bias_correction) out->set_bias_correction(*c.bias_correction);
  if (c.nesterov) out->set_nesterov(*c.nesterov);
  out->set_multi_precision(c.multi_precision);
  out->mutable_lr_mult()->insert(c.lr_mult.begin(), c.lr_mult.end());
  out->mutable_wd_mult()->insert(c.wd_mult.begin(), c.wd_mult.end());
  out->set_key_prefix(c.key_prefix);
  out->set_keep_state(c.keep_state);
  const LrScheduleConfig& s = c.lr_scheduler;
  proto::LrSchedule* p = out->mutable_lr_scheduler();
  p->set_type(s.type);
  p->set_step(s.step);
  for (int64_t step : s.steps) p->add_steps(step);
  p->set_factor(s.factor);
  p->set_stop_factor_lr(s.stop_factor_lr);
  p->set_max_update(s.max_update);
  p->set_final_lr(s.final_lr);
  p->set_pwr(s.pwr);
  p->set_warmup_steps(s.warmup_steps);
  p->set_warmup_begin_lr(s.warmup_begin_lr);
  p->set_warmup_mode(s.warmup_mode);
}

OptimizerConfig OptimizerConfigFromProto(const proto::OptimizerConfig& p) {
  OptimizerConfig c;
  c.name = p.name();
  if (p.has_learning_rate()) c.learning_rate = p.learning_rate();
  c.wd = p.wd();
  c.rescale_grad = p.rescale_grad();
  c.clip_gradient = p.clip_gradient();
  ForEachOptional(&c, [&](std::optional<double>* field, auto has, auto get, auto) {
    if ((p.*has)()) *field = (p.*get)();
  });
  if (p.has_centered()) c.centered = p.centered();
  if (p.has_bias_correction()) c.bias_correction = p.bias_correction();
  if (p.has_nesterov()) c.nesterov = p.nesterov();
  c.multi_precision = p.multi_precision();
  c.lr_mult.insert(p.lr_mult().begin(), p.lr_mult().end());
  c.wd_mult.insert(p.wd_mult().begin(), p.wd_mult().end());
  c.key_prefix = p.key_prefix();
  c.keep_state = p.keep_state();
  const proto::LrSchedule& s = p.lr_scheduler();
  c.lr_scheduler.type = s.type();
  c.lr_scheduler.step = s.step();
  c.lr_scheduler.steps.assign(s.steps().begin(), s.steps().end());
  c.lr_scheduler.factor = s.factor();
  c.lr_scheduler.stop_factor_lr = s.stop_factor_lr();
  c.lr_scheduler.max_update = s.max_update();
  c.lr_scheduler.final_lr = s.final_lr();
  c.lr_scheduler.pwr = s.pwr();
  c.lr_scheduler.warmup_steps = s.warmup_steps();
  c.lr_scheduler.warmup_begin_lr = s.warmup_begin_lr();
  c.lr_scheduler.warmup_mode = s.warmup_mode();
  return c;
}

absl::StatusOr<std::string> SerializeWhole(const google::protobuf::MessageLite& message,
                                           absl::string_view what) {
  const size_t bytes = message.ByteSizeLong();
  if (bytes > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " is ", bytes,
                                                     " bytes serialized, over protobuf's limit of ",
                                                     std::numeric_limits<int>::max(), " bytes"));
  }
  return message.SerializeAsString();
}

}  // namespace kvstore
