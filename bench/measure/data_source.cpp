#include "bench/measure/data_source.h"

#include "engine/data/disk_dataset.h"
#include "engine/io/fileio.h"

namespace trainlab::bench {

std::string DataSource::label() const {
  if (synthetic()) return name;
  return name + " (" + (source.empty() ? dir : source) +
         (content.empty() ? ", manifest CRC-32 " + manifest : ", data CRC-32 " + content) + ")";
}

DataSource data_source_of_dir(const std::string& dir) {
  const DatasetInfo info = read_dataset_info(dir);
  DataSource d;
  d.dir = dir;
  d.source = info.source;
  // The source's last path component ("idx:/usr/share/datasets/fashion-mnist (60000 train, 10000
  // test)" -> "fashion-mnist"), else the directory's.
  std::string path = dir;
  if (!info.source.empty()) {
    path = info.source.substr(info.source.find(':') + 1);
    const auto note = path.rfind(" (");  // the import's note on the splits
    if (note != std::string::npos && path.back() == ')') path.resize(note);
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  d.name = path.substr(path.find_last_of('/') + 1);
  if (d.name.empty()) d.name = dir;
  d.manifest = crc32_hex(info.files.back().crc32);
  std::uint32_t content = 0;
  for (std::size_t i = 0; i + 1 < info.files.size(); ++i) {  // the manifest is listed last
    const DatasetFile& f = info.files[i];
    const std::string entry = f.path + "\t" + std::to_string(f.bytes) + "\t" + crc32_hex(f.crc32) + "\n";
    content = crc32(entry.data(), entry.size(), content);
  }
  d.content = crc32_hex(content);
  return d;
}

DataSource data_source_of(const DataConfig& data, const ModelConfig& model) {
  if (data.dir.empty()) {
    DataSource synthetic;
    synthetic.name = find_model(model.name).context ? "SyntheticTokens" : "SyntheticImages";
    return synthetic;
  }
  return data_source_of_dir(data.dir);
}

void use_data_set(KnobMap& base, const std::string& dir) {
  if (dir.empty()) return;
  base["data"] = dir;
  base.erase("decode_cost");
}

std::function<Batch()> synthetic_batches(const ModelInput& input, bool tokens, std::int64_t batch, Backend& be,
                                         std::uint64_t seed) {
  auto gen = std::make_shared<Generator>(seed);
  return [gen, input, tokens, batch, &be]() {
    Shape shape{batch};
    shape.insert(shape.end(), input.sample.begin(), input.sample.end());
    const auto below = [&gen, &input] {
      return static_cast<std::int64_t>(gen->below(static_cast<std::uint64_t>(input.classes)));
    };
    Batch b;
    if (tokens) {
      const std::int64_t n = shape_numel(shape);
      std::vector<std::int64_t> ids(static_cast<std::size_t>(n)), next(static_cast<std::size_t>(n));
      for (auto& v : ids) v = below();
      for (auto& v : next) v = below();
      b.inputs = Tensor::from_vector(ids, shape, be);
      b.labels = Tensor::from_vector(next, shape, be);
    } else {
      b.inputs = Tensor::uniform(shape, -1, 1, *gen, DType::f32, be);
      std::vector<std::int64_t> labels(static_cast<std::size_t>(batch));
      for (auto& v : labels) v = below();
      b.labels = Tensor::from_vector(labels, {batch}, be);
    }
    return b;
  };
}

double plain_train_step(Module& model, Optimizer& optimizer, const Batch& batch) {
  optimizer.zero_grad(true);
  const Tensor loss = cross_entropy(model.forward(batch.inputs), batch.labels.view({-1}));
  loss.backward();
  optimizer.step();
  return loss.item();
}

}  // namespace trainlab::bench
