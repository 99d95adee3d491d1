// libalpslli: ALPS's application-side request/response interface, answered in-process from
// the job's environment (job_env.h). One pending response per process, guarded by the lock
// the protocol already asks callers to take (alps_app_lli_lock/unlock).
#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "alps/libalpslli.h"
#include "job_env.h"

namespace {

struct Pending {
  bool requested = false;  // a request was put and its header not read yet
  bool header_read = false;
  int status = ALPS_APP_LLI_ALPS_STAT_OK;
  std::vector<char> data;
  size_t read_offset = 0;
};

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
std::mutex g_state_mutex;  // the state itself, for callers that skip the lock
Pending g_pending;

void respond(int status, const void* buf = nullptr, size_t len = 0) {
  g_pending = Pending{};
  g_pending.requested = true;
  g_pending.status = status;
  if (len) g_pending.data.assign(static_cast<const char*>(buf), static_cast<const char*>(buf) + len);
}

// Warns once per process why a credential request could not be answered: the provider's
// own message only says "lli get response failed".
void warn_once(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] { std::fprintf(stderr, "nicemu libalpslli: %s\n", why.c_str()); });
}

void answer(int32_t req_code) {
  using namespace nicemu::alps;
  switch (req_code) {
    case ALPS_APP_LLI_ALPS_REQ_APID:
    case ALPS_APP_LLI_ALPS_REQ_GNI: {
      JobEnv job;
      std::string error;
      if (!read_job_env(job, error, false)) {
        warn_once(error);
        respond(ALPS_APP_LLI_ALPS_STAT_UNAVAIL);
        return;
      }
      if (req_code == ALPS_APP_LLI_ALPS_REQ_APID) {
        respond(ALPS_APP_LLI_ALPS_STAT_OK, &job.apid, sizeof job.apid);
        return;
      }
      size_t len = offsetof(alpsAppLLIGni_t, u) + job.devices.size() * sizeof(alpsAppGni_t);
      std::vector<char> buf(len, 0);
      auto* hdr = reinterpret_cast<alpsAppLLIGni_t*>(buf.data());
      hdr->count = static_cast<int>(job.devices.size());
      for (size_t i = 0; i < job.devices.size(); ++i) {
        alpsAppGni_t e{job.devices[i].device_id, job.devices[i].local_addr, job.devices[i].cookie,
                       job.devices[i].ptag};
        std::memcpy(buf.data() + offsetof(alpsAppLLIGni_t, u) + i * sizeof e, &e, sizeof e);
      }
      respond(ALPS_APP_LLI_ALPS_STAT_OK, buf.data(), buf.size());
      return;
    }
    case ALPS_APP_LLI_ALPS_REQ_CPUMASK: {
      // The CPUs this process may run on: nicemu places no PE on particular CPUs.
      cpu_set_t set;
      CPU_ZERO(&set);
      if (sched_getaffinity(0, sizeof set, &set) != 0) {
        respond(ALPS_APP_LLI_ALPS_STAT_FAIL);
        return;
      }
      respond(ALPS_APP_LLI_ALPS_STAT_OK, &set, sizeof set);
      return;
    }
    case ALPS_APP_LLI_ALPS_REQ_EXITING:
    case ALPS_APP_LLI_ALPS_REQ_START:
      // No shepherd to tell and no start barrier to wait for: acknowledged.
      respond(ALPS_APP_LLI_ALPS_STAT_OK);
      return;
    case ALPS_APP_LLI_ALPS_REQ_SIGNAL:
    case ALPS_APP_LLI_ALPS_REQ_REBIND:
      // Signalling other PEs and CPU rebinding need the shepherd; the documented answer
      // of an ALPS that cannot provide them.
      respond(ALPS_APP_LLI_ALPS_STAT_UNAVAIL);
      return;
    default:
      respond(ALPS_APP_LLI_ALPS_STAT_REQ);
      return;
  }
}

// A pthread return code as ALPS returns it: 0, or -1 with errno set.
int as_alps_rc(int rc) {
  if (rc == 0) return 0;
  errno = rc;
  return -1;
}

}  // namespace

extern "C" {

int alps_app_lli_init(void) {
  errno = ENOSYS;
  return -1;
}
int alps_app_lli_pipes(int[2], int[2]) {
  errno = ENOSYS;
  return -1;
}
int alps_app_lli_get_request(alpsLliReq_t*) {
  errno = ENOSYS;
  return -1;
}
int alps_app_lli_get_request_bytes(void*, size_t) {
  errno = ENOSYS;
  return -1;
}
int alps_app_lli_put_response(const void*, size_t, int) {
  errno = ENOSYS;
  return -1;
}

int alps_app_lli_lock(void) { return as_alps_rc(pthread_mutex_lock(&g_lock)); }

int alps_app_lli_unlock(void) { return as_alps_rc(pthread_mutex_unlock(&g_lock)); }

int alps_app_lli_put_request(int32_t req_code, const void* buf, size_t count) {
  if (count != 0 && buf == nullptr) {
    errno = EINVAL;
    return -1;
  }
  std::lock_guard g(g_state_mutex);
  // Request data is accepted and ignored: no request answered here reads any.
  answer(req_code);
  return 0;
}

int alps_app_lli_put_request_bytes(const void* buf, size_t count) {
  if (count != 0 && buf == nullptr) {
    errno = EINVAL;
    return -1;
  }
  return 0;
}

int alps_app_lli_get_response(int* status, size_t* count) {
  std::lock_guard g(g_state_mutex);
  if (!g_pending.requested || g_pending.header_read) {
    errno = EINVAL;  // ALPS would block forever on an empty pipe
    return -1;
  }
  g_pending.header_read = true;
  if (status) *status = g_pending.status;
  if (count) *count = g_pending.data.size();
  return 0;
}

int alps_app_lli_get_response_bytes(void* buf, size_t count) {
  std::lock_guard g(g_state_mutex);
  if (!g_pending.header_read || (count != 0 && buf == nullptr) ||
      count > g_pending.data.size() - g_pending.read_offset) {
    errno = EINVAL;
    return -1;
  }
  if (count) std::memcpy(buf, g_pending.data.data() + g_pending.read_offset, count);
  g_pending.read_offset += count;
  return 0;
}

int alps_app_lli_put_simple_request(int32_t req_code, const void* buf, size_t count) {
  if (alps_app_lli_lock() != 0) return -1;
  int rc = alps_app_lli_put_request(req_code, buf, count);
  int status = ALPS_APP_LLI_ALPS_STAT_OK;
  size_t len = 0;
  if (rc == 0) rc = alps_app_lli_get_response(&status, &len);
  {
    std::lock_guard g(g_state_mutex);
    g_pending = Pending{};  // the response of a simple request is not delivered
  }
  alps_app_lli_unlock();
  if (rc == 0 && status != ALPS_APP_LLI_ALPS_STAT_OK) {
    errno = EIO;
    return -1;
  }
  return rc;
}

}  // extern "C"
