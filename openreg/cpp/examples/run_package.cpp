// Runs an AOTInductor package compiled for openreg, in a C++ program with no Python.
//
//   run_package MODEL.pt2 INPUTS.pt OUTPUTS.pt [REPEAT]
//
// INPUTS.pt holds a list of CPU tensors (torch.save in Python); the program moves them to the
// package's device (openreg:0 for a model compiled on openreg; a CPU package runs too, for
// comparison), runs the model, and saves its outputs (on the CPU) to OUTPUTS.pt. With REPEAT,
// it also times REPEAT more runs and prints the median in microseconds.

#include <torch_openreg.h>

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/serialize.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace {

std::vector<char> read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

std::vector<at::Tensor> load_tensors(const std::string& path) {
  c10::IValue value = torch::pickle_load(read_file(path));
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& item : value.isTuple() ? value.toTupleRef().elements() : value.toListRef())
    tensors.push_back(item.toTensor());
  return tensors;
}

void save_tensors(const std::vector<at::Tensor>& tensors, const std::string& path) {
  // A tuple of tensors: Python's torch.load reads it with weights_only=True.
  std::vector<c10::IValue> items(tensors.begin(), tensors.end());
  std::vector<char> bytes = torch::pickle_save(c10::ivalue::Tuple::create(std::move(items)));
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

} // namespace

// ANCHOR: main
int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: " << argv[0] << " MODEL.pt2 INPUTS.pt OUTPUTS.pt [REPEAT]\n";
    return 2;
  }
  char message[1024];
  if (torch_openreg_init(message, sizeof(message)) != 0) {
    std::cerr << "torch_openreg_init failed: " << message << "\n";
    return 1;
  }
  try {
    // The package names its device ("openreg"); the loader asks the runner registered for it.
    torch::inductor::AOTIModelPackageLoader loader(argv[1]);
    c10::Device device(loader.get_metadata()["AOTI_DEVICE_KEY"]);
    if (!device.has_index()) device.set_index(0);
    std::vector<at::Tensor> inputs;
    for (const at::Tensor& t : load_tensors(argv[2])) inputs.push_back(t.to(device));

    std::vector<at::Tensor> outputs;
    for (const at::Tensor& t : loader.run(inputs)) outputs.push_back(t.cpu()); // .cpu() waits
    save_tensors(outputs, argv[3]);

    if (argc > 4) {
      std::vector<double> times;
      for (int i = 0, n = std::stoi(argv[4]); i < n; ++i) {
        auto start = std::chrono::steady_clock::now();
        auto result = loader.run(inputs);
        if (!device.is_cpu()) c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.index());
        times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
      }
      std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
      std::cout << "median_us " << times[times.size() / 2] << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
// ANCHOR_END: main
