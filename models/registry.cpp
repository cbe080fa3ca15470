// The models `--model NAME` finds (engine/nn/model_registry.h): one line each. A new model is a
// folder of its own under models/ (its Module, its ModelDef, a CMakeLists.txt naming its sources)
// and its line here.
#include "models/gpt/gpt.h"
#include "models/mlp/mlp.h"
#include "models/resnet/resnet.h"
#include "models/smallcnn/smallcnn.h"

namespace trainlab {
namespace {

const ModelRegistration registration{{
    smallcnn_model(),
    mlp_model(),
    resnet_model(),
    gpt_model(),
}};

}  // namespace
}  // namespace trainlab
