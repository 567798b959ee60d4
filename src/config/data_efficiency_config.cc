// data_efficiency (deepspeed/config/data_efficiency_config.h): its key tables, the curriculum's rules (DeepSpeed's
// CurriculumScheduler asserts, and what this build implements of it), and the pre-0.19.8 top-level
// curriculum_learning read into it.
#include <limits>

#include "config/sections.h"

namespace deepspeed::config {

namespace {

using M = CurriculumMetricConfig;

// A list of integers >= 0 (schedule_config's difficulty and max_step).
Field<M> int_list_key(std::string name, std::vector<int64_t> M::*m, std::string ours) {
  return custom_key<M>(
      std::move(name), "list of integers >= 0", std::move(ours),
      [m](ObjectReader& r, const std::string& key, M& s) {
        const Json* v = r.find(key);
        if (!v || v->is_null()) return;
        if (!v->is_array()) fail_at(r.path_of(key), "expected a list of integers, got " + v->dump());
        (s.*m).clear();
        for (size_t i = 0; i < v->size(); ++i)
          (s.*m).push_back(ObjectReader::to_int((*v)[i], r.path_of(key) + "[" + std::to_string(i) + "]", 0,
                                                std::numeric_limits<int64_t>::max()));
      },
      [m](const M& s) { return std::optional<OrderedJson>(s.*m); });
}

Field<M> optional_number_key(std::string name, std::optional<double> M::*m, std::string ours) {
  return custom_key<M>(
      std::move(name), "number > 0 or null", std::move(ours),
      [m](ObjectReader& r, const std::string& key, M& s) {
        const Json* v = r.find(key);
        if (!v || v->is_null()) return;
        const double x = ObjectReader::to_number(*v, r.path_of(key), 0.0, std::numeric_limits<double>::infinity());
        if (!(x > 0)) fail_at(r.path_of(key), "must be > 0");
        s.*m = x;
      },
      [m](const M& s) { return std::optional<OrderedJson>(optional_json(s.*m)); });
}

// schedule_config: a dict whose keys live in the metric's struct.
const Section<M>& schedule_config_section() {
  static const Section<M> kSection(
      SectionKind::kDict,
      {
          optional_int_key<M, int64_t>("total_curriculum_step", &M::total_curriculum_step, 1,
                                       "fixed_linear/fixed_root: steps from min_difficulty to max_difficulty"),
          optional_int_key<M, int64_t>("difficulty_step", &M::difficulty_step, 1,
                                       "fixed_linear/fixed_root: each difficulty a multiple of it"),
          optional_number_key("root_degree", &M::root_degree, "fixed_root: the root's degree (2: square root)"),
          int_list_key("difficulty", &M::difficulty, "fixed_discrete: the difficulties in order"),
          int_list_key("max_step", &M::max_step, "fixed_discrete: the last step of each difficulty but the last"),
      });
  return kSection;
}

// The scheduler's own keys, shared by a data_efficiency metric and the old top-level section.
template <class S>
std::vector<Field<S>> schedule_fields() {
  return {
      optional_int_key<S, int64_t>("min_difficulty", &S::min_difficulty, 1,
                                   "the first sequence length (required when enabled)"),
      optional_int_key<S, int64_t>("max_difficulty", &S::max_difficulty, 1,
                                   "the full sequence length, reached at the schedule's end (required)"),
      string_key<S>("schedule_type", &S::schedule_type, "fixed_linear, fixed_root or fixed_discrete"),
      with_keys_of(custom_key<S>(
                       "schedule_config", "section", "the schedule's parameters",
                       [](ObjectReader& r, const std::string& key, S& s) {
                         const Json* v = r.find(key);
                         if (v && !v->is_null()) schedule_config_section().parse_into(*v, r.path_of(key), r.autos(), s);
                       },
                       [](const S& s) { return std::optional<OrderedJson>(schedule_config_section().dump(s)); }),
                   schedule_config_section()),
  };
}

const Section<M>& metric_section() {
  static const Section<M> kSection = [] {
    std::vector<Field<M>> f = schedule_fields<M>();
    f.push_back(choice_key<M>("difficulty_type", &M::difficulty_type, {"value", "percentile"},
                              "how difficulty is measured (seqlen: value)"));
    f.push_back(choice_key<M>("clustering_type", &M::clustering_type, {"single_cluster", "schedule_based"},
                              "how samples are grouped by difficulty (seqlen: single_cluster)"));
    f.push_back(optional_string_key<M>("index_to_sample_path", &M::index_to_sample_path,
                                       "no effect for seqlen: the data analyzer's sample index"));
    f.push_back(optional_string_key<M>("index_to_metric_path", &M::index_to_metric_path,
                                       "no effect for seqlen: the data analyzer's metric index"));
    return Section<M>(SectionKind::kDict, std::move(f));
  }();
  return kSection;
}

// DeepSpeed's CurriculumScheduler asserts, and this build's limits: `m` at `path`, enabled.
void check_schedule(const M& m, const std::string& path) {
  if (!m.min_difficulty) fail_at(path + ".min_difficulty", "is required when curriculum learning is enabled");
  if (!m.max_difficulty) fail_at(path + ".max_difficulty", "is required when curriculum learning is enabled");
  if (*m.min_difficulty > *m.max_difficulty)
    fail_at(path + ".min_difficulty", "must be <= max_difficulty (" + std::to_string(*m.max_difficulty) + ")");
  const std::string sc = path + ".schedule_config";
  if (m.schedule_type == "fixed_linear" || m.schedule_type == "fixed_root") {
    if (!m.total_curriculum_step) fail_at(sc + ".total_curriculum_step", "is required by " + m.schedule_type);
    if (!m.difficulty_step) fail_at(sc + ".difficulty_step", "is required by " + m.schedule_type);
    if (m.schedule_type == "fixed_root" && !m.root_degree) fail_at(sc + ".root_degree", "is required by fixed_root");
  } else if (m.schedule_type == "fixed_discrete") {
    if (m.difficulty.empty() || m.max_step.empty() || m.difficulty.size() != m.max_step.size() + 1)
      fail_at(sc, "fixed_discrete needs \"difficulty\" and \"max_step\", difficulty one longer than max_step");
  } else if (m.schedule_type == "custom") {
    fail_at(path + ".schedule_type",
            "\"custom\" (a Python schedule function) is not supported by deepspeed-cpp; "
            "use fixed_linear, fixed_root or fixed_discrete");
  } else {
    fail_at(path + ".schedule_type",
            "must be fixed_linear, fixed_root or fixed_discrete, got \"" + m.schedule_type + "\"");
  }
}

using L = CurriculumLearningConfig;

const Section<L>& curriculum_learning_section() {
  static const Section<L> kSection(
      SectionKind::kDict,
      {
          bool_key<L>("enabled", &L::enabled, "truncate each batch to the schedule's sequence length"),
          optional_string_key<L>("data_cluster_path", &L::data_cluster_path,
                                 "no effect: where DeepSpeed's sampler writes its clusters"),
          custom_key<L>(
              "curriculum_metrics", "object of metric sections", "the metrics (only \"seqlen\" is built)",
              [](ObjectReader& r, const std::string& key, L& s) {
                const Json* v = r.find(key);
                if (!v || v->is_null()) return;
                if (!v->is_object()) fail_at(r.path_of(key), "expected an object of metrics, got " + v->dump());
                for (const auto& [name, node] : v->items())
                  s.curriculum_metrics[name] = metric_section().parse(node, r.path_of(key) + "." + name, r.autos());
              },
              [](const L& s) {
                OrderedJson j = OrderedJson::object();
                for (const auto& [name, m] : s.curriculum_metrics) j[name] = metric_section().dump(m);
                return std::optional<OrderedJson>(j);
              }),
      },
      [](ObjectReader& r, L& s) {
        if (!s.enabled) return;
        const std::string metrics = r.path_of("curriculum_metrics");
        if (s.curriculum_metrics.empty()) fail_at(metrics, "is required when curriculum learning is enabled");
        for (const auto& [name, m] : s.curriculum_metrics) {
          const std::string path = metrics + "." + name;
          if (name != "seqlen")
            fail_at(path,
                    "is not supported by deepspeed-cpp: only the \"seqlen\" metric (sequence-length "
                    "truncation) is built; other metrics need the data analyzer's index files");
          if (m.difficulty_type != "value") fail_at(path + ".difficulty_type", "seqlen is by \"value\"");
          if (m.clustering_type != "single_cluster")
            fail_at(path + ".clustering_type", "seqlen takes every sample: \"single_cluster\"");
          check_schedule(m, path);
        }
      });
  return kSection;
}

using D = DataSamplingConfig;

const Section<D>& data_sampling_section() {
  static const Section<D> kSection(
      SectionKind::kDict,
      {
          bool_key<D>("enabled", &D::enabled, "DeepSpeed's data sampler (here: the curriculum's switch with it)"),
          int_key<D, int64_t>("num_epochs", &D::num_epochs, 1,
                              "no effect: our datasets build the epochs the samples asked for need"),
          int_key<D, int>("num_workers", &D::num_workers, 0, "no effect: the memory-mapped loader reads inline"),
          bool_key<D>("pin_memory", &D::pin_memory, "no effect: DeepSpeed's Python data loader"),
          section_key<D>("curriculum_learning", &D::curriculum_learning, curriculum_learning_section(),
                         "curriculum learning"),
          disabled_only_key<D>("dynamic_batching", "dynamic batching"),
      });
  return kSection;
}

// The old top-level section: the scheduler's keys plus its switch and type.
struct LegacyCurriculum : CurriculumMetricConfig {
  bool enabled = false;
  std::string curriculum_type = "seqlen";
};

const Section<LegacyCurriculum>& legacy_section() {
  using G = LegacyCurriculum;
  static const Section<G> kSection = [] {
    std::vector<Field<G>> f = schedule_fields<G>();
    f.push_back(bool_key<G>("enabled", &G::enabled, "the sequence-length curriculum (pre-0.19.8 form)"));
    f.push_back(string_key<G>("curriculum_type", &G::curriculum_type, "only \"seqlen\""));
    return Section<G>(SectionKind::kDict, std::move(f));
  }();
  return kSection;
}

}  // namespace

const Section<DataEfficiencyConfig>& data_efficiency_section() {
  using E = DataEfficiencyConfig;
  static const Section<E> kSection(
      SectionKind::kDict,
      {
          bool_key<E>("enabled", &E::enabled, "data efficiency (here: the curriculum's switch with it)"),
          int_key<E, int64_t>("seed", &E::seed, 0,
                              "no effect: DeepSpeed's sampler shuffle (ours keeps the dataset's order and seed)"),
          section_key<E>("data_sampling", &E::data_sampling, data_sampling_section(), "data sampling"),
          disabled_only_key<E>("data_routing", "data routing (random-LTD)"),
      });
  return kSection;
}

Field<Config> legacy_curriculum_key() {
  return custom_key<Config>(
      "curriculum_learning", "section",
      "DeepSpeed < 0.19.8's form of data_efficiency.data_sampling.curriculum_learning (read into it)",
      [](ObjectReader& r, const std::string& key, Config& c) {
        const Json* v = r.find(key);
        if (!v || v->is_null()) return;
        const std::string path = r.path_of(key);
        LegacyCurriculum old = legacy_section().parse(*v, path, r.autos());
        const std::string target = "data_efficiency.data_sampling.curriculum_learning";
        if (!old.enabled) {
          warn(path + ": removed in DeepSpeed 0.19.8 and disabled here: dropped (its place is " + target + ")");
          return;
        }
        if (old.curriculum_type != "seqlen")
          fail_at(path + ".curriculum_type",
                  "only \"seqlen\" is supported by deepspeed-cpp, got \"" + old.curriculum_type + "\"");
        CurriculumLearningConfig& cl = c.data_efficiency.data_sampling.curriculum_learning;
        if (cl.enabled) fail_at(path, "give the curriculum once: " + target + " is enabled too");
        check_schedule(old, path);
        cl.enabled = true;
        cl.curriculum_metrics["seqlen"] = static_cast<const CurriculumMetricConfig&>(old);
        c.data_efficiency.enabled = true;
        c.data_efficiency.data_sampling.enabled = true;
        warn(path + ": removed in DeepSpeed 0.19.8; read as " + target +
             ".curriculum_metrics.seqlen (a dump "
             "writes it there)");
      },
      [](const Config&) { return std::optional<OrderedJson>(); });
}

}  // namespace deepspeed::config
