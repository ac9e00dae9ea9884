// cuda/scoped_device.h against a simulated CUDA driver and runtime (no GPU, no CUDA headers), built and run by
// tests/cudnn/test_scoped_device.py. The simulation follows CUDA 12+: cudaSetDevice(d) creates d's primary context if
// the process has none and makes it current; cudaGetDevice reports the current context's device, or the runtime's own
// per-thread device (0 until set) when no context is current. Prints one line per failed check, then a summary; exits
// non-zero on any failure.
#include "scoped_device.h"

#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace {

struct Context {
  int device;
  bool primary;
};

struct Driver {
  std::map<int, Context*> primaries;  // device -> its primary context, once created
  std::vector<Context*> owned;
  std::map<int, int> primaries_created;
  Context* current = nullptr;  // the thread's current context
  int runtime_device = 0;      // the runtime's device when no context is current
  std::vector<std::string> calls;
  std::string fail;  // the call that fails, if any

  ~Driver() {
    for (Context* context : owned) delete context;
  }
  Context* Primary(int device) {
    if (primaries.count(device) == 0) {
      owned.push_back(new Context{device, true});
      primaries[device] = owned.back();
      ++primaries_created[device];
    }
    return primaries[device];
  }
  Context* Custom(int device) {  // a context made with cuCtxCreate, not the device's primary one
    owned.push_back(new Context{device, false});
    return owned.back();
  }
  std::string Call(const std::string& name) {
    calls.push_back(name);
    return name == fail ? name + " failed" : "";
  }
};

struct FakeOps {
  Driver* driver;
  std::string GetCurrentContext(void** context) {
    std::string error = driver->Call("GetCurrentContext");
    if (error.empty()) *context = driver->current;
    return error;
  }
  std::string SetCurrentContext(void* context) {
    std::string error = driver->Call("SetCurrentContext");
    if (error.empty()) driver->current = static_cast<Context*>(context);
    return error;
  }
  std::string GetDevice(int* device) {
    std::string error = driver->Call("GetDevice");
    if (error.empty()) *device = driver->current != nullptr ? driver->current->device : driver->runtime_device;
    return error;
  }
  std::string SetDevice(int device) {
    std::string error = driver->Call("SetDevice");
    if (error.empty()) {
      driver->current = driver->Primary(device);
      driver->runtime_device = device;
    }
    return error;
  }
};

using Guard = jax_cudnn_rnn::BasicScopedDevice<FakeOps>;

int failures = 0;
int checks = 0;

void Check(bool ok, const char* scenario, const char* what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::printf("FAILED [%s]: %s\n", scenario, what);
  }
}

bool Called(const Driver& driver, const std::string& name) {
  for (const std::string& call : driver.calls) {
    if (call == name) return true;
  }
  return false;
}

void NoContextCurrent() {
  const char* scenario = "no context current, device 1 asked";
  Driver driver;
  {
    Guard guard(FakeOps{&driver});
    Check(guard.Activate(1).empty(), scenario, "Activate succeeds");
    Check(driver.current == driver.primaries[1], scenario, "device 1's primary context is current in the scope");
  }
  Check(driver.current == nullptr, scenario, "afterwards no context is current, as before");
  Check(driver.primaries_created.count(0) == 0, scenario, "GPU 0's primary context is never created");
}

void AnotherDeviceCurrent() {
  const char* scenario = "device 0's primary context current, device 1 asked";
  Driver driver;
  Context* zero = driver.Primary(0);
  driver.current = zero;
  {
    Guard guard(FakeOps{&driver});
    Check(guard.Activate(1).empty(), scenario, "Activate succeeds");
    Check(driver.current == driver.primaries[1], scenario, "device 1's primary context is current in the scope");
  }
  Check(driver.current == zero, scenario, "afterwards device 0's context is current again");
}

void SameDeviceCurrent() {
  const char* scenario = "device 1's context current, device 1 asked";
  Driver driver;
  Context* one = driver.Primary(1);
  driver.current = one;
  {
    Guard guard(FakeOps{&driver});
    Check(guard.Activate(1).empty(), scenario, "Activate succeeds");
    Check(!Called(driver, "SetDevice"), scenario, "no switch");
  }
  Check(driver.current == one, scenario, "afterwards the same context is current");
  Check(!Called(driver, "SetCurrentContext"), scenario, "nothing to restore");
}

void CustomContextCurrent() {
  const char* scenario = "a non-primary context of device 0 current, device 1 asked";
  Driver driver;
  Context* custom = driver.Custom(0);
  driver.current = custom;
  {
    Guard guard(FakeOps{&driver});
    Check(guard.Activate(1).empty(), scenario, "Activate succeeds");
  }
  Check(driver.current == custom, scenario, "afterwards that very context is current, not device 0's primary one");
  Check(driver.primaries_created.count(0) == 0, scenario, "GPU 0's primary context is never created");
}

void QueryFails() {
  const char* scenario = "cuCtxGetCurrent fails";
  Driver driver;
  driver.fail = "GetCurrentContext";
  {
    Guard guard(FakeOps{&driver});
    Check(guard.Activate(1) == "GetCurrentContext failed", scenario, "Activate returns the error");
  }
  Check(!Called(driver, "SetDevice") && !Called(driver, "SetCurrentContext"), scenario, "nothing switched or restored");
}

void SwitchFails() {
  const char* scenario = "cudaSetDevice fails";
  Driver driver;
  Context* zero = driver.Primary(0);
  driver.current = zero;
  driver.fail = "SetDevice";
  {
    Guard guard(FakeOps{&driver});
    Check(guard.Activate(1) == "SetDevice failed", scenario, "Activate returns the error");
  }
  Check(driver.current == zero, scenario, "the previous context is current afterwards");
}

void CurrentDeviceWithoutContext() {
  const char* scenario = "no context current, the current device (-1) asked";
  for (int runtime_device : {0, 2}) {  // never set (0), or set before the thread's context was taken away (2)
    Driver driver;
    driver.runtime_device = runtime_device;
    {
      Guard guard(FakeOps{&driver});
      Check(guard.Activate(-1).empty(), scenario, "Activate succeeds");
      Check(guard.device() == runtime_device, scenario, "-1 resolves to the runtime's device for the thread");
      Check(driver.current == driver.primaries[runtime_device], scenario, "that device's primary context is current");
    }
    Check(driver.current == nullptr, scenario, "afterwards no context is current, as before");
    Check(driver.primaries.size() == 1, scenario, "no other device's primary context is created");
  }
}

void CurrentDeviceWithContext() {
  const char* scenario = "a non-primary context of device 1 current, the current device (-1) asked";
  Driver driver;
  Context* custom = driver.Custom(1);
  driver.current = custom;
  {
    Guard guard(FakeOps{&driver});
    Check(guard.Activate(-1).empty(), scenario, "Activate succeeds");
    Check(guard.device() == 1, scenario, "-1 resolves to the current context's device");
    Check(driver.current == custom && !Called(driver, "SetDevice"), scenario, "that context stays current");
  }
  Check(driver.current == custom && !Called(driver, "SetCurrentContext"), scenario, "nothing to restore");
  Check(driver.primaries_created.empty(), scenario, "no primary context is created");
}

void CurrentDeviceQueryFails() {
  const char* scenario = "cudaGetDevice fails while resolving -1";
  Driver driver;
  driver.fail = "GetDevice";
  {
    Guard guard(FakeOps{&driver});
    Check(guard.Activate(-1) == "GetDevice failed", scenario, "Activate returns the error");
    Check(guard.device() == -1, scenario, "no device is held");
  }
  Check(!Called(driver, "SetDevice") && !Called(driver, "SetCurrentContext"), scenario, "nothing switched or restored");
  Check(driver.current == nullptr, scenario, "no context is current");
}

void ActivatedTwice() {
  const char* scenario = "Activate called twice on one guard";
  Driver driver;
  Context* one = driver.Primary(1);
  driver.current = one;
  Guard guard(FakeOps{&driver});
  Check(guard.Activate(1).empty() && guard.device() == 1, scenario, "the first call holds device 1 (no switch)");
  Check(guard.Activate(0) == "BasicScopedDevice::Activate was called twice on one guard", scenario,
        "the second call is an error, even after a first that switched nothing");
  Check(driver.current == one && guard.device() == 1, scenario, "device 1 stays held");
}

}  // namespace

int main() {
  NoContextCurrent();
  AnotherDeviceCurrent();
  SameDeviceCurrent();
  CustomContextCurrent();
  QueryFails();
  SwitchFails();
  CurrentDeviceWithoutContext();
  CurrentDeviceWithContext();
  CurrentDeviceQueryFails();
  ActivatedTwice();
  std::printf("%d of %d checks failed\n", failures, checks);
  return failures == 0 ? 0 : 1;
}
